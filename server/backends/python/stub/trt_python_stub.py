"""The process that hosts one instance of a Python model (``model.py`` with ``TritonPythonModel``).

Started by the server with ``python trt_python_stub.py --fd N`` (or ``--auto-complete``), under the
model's own interpreter when ``EXECUTION_ENV_PATH`` names one. It talks to the server over the
inherited socket: the server sends ``init``, ``execute`` and ``finalize``; this side answers with
results, and sends ``bls`` requests, responses from response senders and log lines of its own.
A reader thread takes every incoming frame, so BLS answers arrive while ``execute`` is running.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import signal
import socket
import sys
import threading
import traceback
from typing import Any

import _ipc
import triton_python_backend_utils as pb_utils


class Runtime:
    """The model process' side of the connection; pb_utils calls into it.

    No reader thread: the main thread reads the socket while idle, and a BLS call reads the
    answers it waits for itself (a handoff between threads per request costs more than the model).
    Answers that arrive for another caller (threads, or an async model's concurrent calls) are
    parked for it under ``_read_lock``.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._frames = _ipc.BlockingFrameSource(sock)
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._answers: dict[int, Any] = {}
        self._next_call = 0
        self._call_lock = threading.Lock()
        self.input_arena: _ipc.Arena | None = None
        self.output_arena: _ipc.Arena | None = None

    def send(self, message: Any) -> None:
        frame = _ipc.encode_frame(message)
        with self._send_lock:
            self._sock.sendall(frame)

    def next_command(self) -> Any:
        """Block until the server sends something other than a BLS answer."""
        try:
            return self._frames.next()
        except (EOFError, OSError):
            return ("finalize",)

    def _wait_answer(self, call: int) -> Any:
        with self._read_lock:
            while call not in self._answers:
                message = self._frames.next()
                if message[0] != "bls_result":
                    raise RuntimeError(f"unexpected message {message[0]!r} while waiting for a BLS answer")
                self._answers[message[1]] = message[2]
            return self._answers.pop(call)

    # -- called by pb_utils ----------------------------------------------------------------------

    def bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> list[pb_utils.InferenceResponse]:
        with self._call_lock:
            call = self._next_call
            self._next_call += 1
        self.send(
            (
                "bls",
                call,
                {
                    "model_name": request.model_name,
                    "model_version": request._model_version,
                    "id": request.request_id(),
                    "inputs": {t.name(): t.as_numpy() for t in request.inputs()},
                    "outputs": request.requested_output_names(),
                    "parameters": json.loads(request.parameters()),
                    "correlation_id": request.correlation_id(),
                    "flags": request.flags(),
                    "timeout": request.timeout(),
                    "decoupled": decoupled,
                },
            )
        )
        result = self._wait_answer(call)
        responses = []
        for item in result:
            if item["error"] is not None:
                message, code = item["error"]
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code)))
            else:
                tensors = [pb_utils.Tensor(name, array) for name, array in item["outputs"].items()]
                responses.append(pb_utils.InferenceResponse(tensors, parameters=item.get("parameters")))
        return responses

    def send_response(self, execution: int, index: int, response: Any, final: bool) -> None:
        self.send(
            ("response", execution, index, _describe(response, None) if response is not None else None, final)
        )

    def log(self, level: str, message: str) -> None:
        self.send(("log", level, message))


def _describe(response: pb_utils.InferenceResponse, arena: _ipc.Arena | None) -> dict[str, Any]:
    if response.has_error():
        error = response.error()
        return {"error": (error.message(), error.code()), "outputs": [], "parameters": {}}
    tensors = {t.name(): t.as_numpy() for t in response.output_tensors()}
    return {
        "error": None,
        "outputs": _ipc.pack_tensors(tensors, arena),
        "parameters": response._parameters,
    }


def load_model_class(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise RuntimeError(f"{path} defines no class TritonPythonModel")
    return module.TritonPythonModel


class Execution:
    def __init__(self, runtime: Runtime, model: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.runtime = runtime
        self.model = model
        self.loop = loop

    def run(self, execution: int, metas: list[dict[str, Any]]) -> None:
        runtime = self.runtime
        assert runtime.input_arena is not None and runtime.output_arena is not None
        requests = []
        for index, meta in enumerate(metas):
            tensors = _ipc.unpack_tensors(meta["inputs"], runtime.input_arena, copy=False)
            request = pb_utils.InferenceRequest(
                requested_output_names=meta["outputs"],
                inputs=[pb_utils.Tensor(name, array) for name, array in tensors.items()],
                request_id=meta["id"],
                correlation_id=meta["correlation_id"],
                flags=meta["flags"],
                parameters=meta["parameters"],
            )
            request._sender = pb_utils.InferenceResponseSender(execution, index)
            requests.append(request)
        runtime.output_arena.reset()
        try:
            result = self.model.execute(requests)
            if inspect.isawaitable(result):
                result = self.loop.run_until_complete(result)
        except Exception as exc:
            message = (
                str(exc) if isinstance(exc, pb_utils.TritonModelException) else f"{type(exc).__name__}: {exc}"
            )
            if isinstance(exc, pb_utils.TritonError):
                error = (exc.message(), exc.code())
            else:
                error = (message, pb_utils.TritonError.INTERNAL)
            runtime.send(("result", execution, {"error": error, "traceback": traceback.format_exc()}))
            return
        if result is None:  # responses went through response senders
            runtime.send(("result", execution, {"responses": None}))
            return
        if not isinstance(result, list | tuple) or len(result) != len(requests):
            count = len(result) if isinstance(result, list | tuple) else type(result).__name__
            runtime.send(
                (
                    "result",
                    execution,
                    {
                        "error": (
                            f"execute() must return one response per request ({len(requests)}), got {count}",
                            1,
                        )
                    },
                )
            )
            return
        described = [
            _describe(r, runtime.output_arena)
            if isinstance(r, pb_utils.InferenceResponse)
            else {
                "error": (f"execute() returned {type(r).__name__}, not InferenceResponse", 1),
                "outputs": [],
            }
            for r in result
        ]
        runtime.send(("result", execution, {"responses": described}))


def serve(fd: int) -> None:
    # The server decides when this process ends (finalize, or its socket closing): a Ctrl-C sent
    # to the terminal's whole process group must not kill the model under a draining server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    runtime = Runtime(sock)
    pb_utils._install_runtime(runtime)
    loop = asyncio.new_event_loop()
    model: Any = None
    while True:
        message = runtime.next_command()
        kind = message[0]
        if kind == "init":
            _, args, model_path, input_arena, output_arena = message
            try:
                runtime.input_arena = _ipc.Arena(*input_arena)
                runtime.output_arena = _ipc.Arena(*output_arena)
                model = load_model_class(model_path)()
                if hasattr(model, "initialize"):
                    result = model.initialize(args)
                    if inspect.isawaitable(result):
                        loop.run_until_complete(result)
                runtime.send(("ready", sys.executable))
            except Exception as exc:
                runtime.send(("init_error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        elif kind == "arena":
            if runtime.input_arena is not None:
                runtime.input_arena.close()
            runtime.input_arena = _ipc.Arena(*message[1])
        elif kind == "execute":
            Execution(runtime, model, loop).run(message[1], message[2])
        elif kind == "finalize":
            if model is not None and hasattr(model, "finalize"):
                try:
                    model.finalize()
                except Exception:
                    traceback.print_exc()
            runtime.send(("finalized",))
            return


class _StderrRuntime:
    """Log lines from auto_complete_config, which runs before any connection exists."""

    def log(self, level: str, message: str) -> None:
        print(f"[{level}] {message}", file=sys.stderr)


def auto_complete(model_path: str, result_path: str) -> None:
    """Read a config JSON on stdin, let the model complete it, write the result to ``result_path``
    (not stdout: the model may print while it is imported)."""
    pb_utils._install_runtime(_StderrRuntime())
    config = json.loads(sys.stdin.read())
    model_class = load_model_class(model_path)
    if hasattr(model_class, "auto_complete_config"):
        completed = model_class.auto_complete_config(pb_utils.ModelConfig(config))
        config = completed.as_dict() if completed is not None else config
    with open(result_path, "w", encoding="utf-8") as out:
        json.dump(config, out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int)
    parser.add_argument("--auto-complete", metavar="MODEL_PY")
    parser.add_argument("--result", metavar="JSON_FILE")
    args = parser.parse_args()
    if args.auto_complete:
        auto_complete(args.auto_complete, args.result)
    else:
        serve(args.fd)


if __name__ == "__main__":
    main()
