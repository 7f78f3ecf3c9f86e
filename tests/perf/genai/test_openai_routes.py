"""``trt perf --endpoint-type chat|completions`` against a real HTTP server on loopback that speaks
OpenAI's documented wire format: request bodies as the API defines them, streamed answers as server-sent
events of ``chat.completion.chunk`` / ``text_completion`` objects over chunked transfer encoding, ending
with ``data: [DONE]``, and errors in OpenAI's error shape. The server paces its tokens, so the figures
have known values; it records what it was sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.perf.genai.genai_support import EMITTED
from tests.perf.perf_support import run_perf

FIRST_MS, STEP_MS, MAX_TOKENS_ALLOWED = 60.0, 10.0, 64


class OpenAIHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        OpenAIHandler.received.append({"path": self.path, **request})
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
            return
        count = int(request.get("max_tokens", 16))
        if count > MAX_TOKENS_ALLOWED:
            error = {"message": f"max_tokens {count} is too large", "type": "invalid_request_error",
                     "param": "max_tokens", "code": None}  # fmt: skip
            self._json(400, {"error": error})
            return
        words = [" " + EMITTED[i % len(EMITTED)] for i in range(count)]
        kind = "chat.completion" if chat else "text_completion"
        began = time.perf_counter()
        if not request.get("stream"):
            time.sleep((FIRST_MS + (count - 1) * STEP_MS) / 1000)
            text = "".join(words)
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}}
                if chat
                else {"index": 0, "text": text}
            )
            self._json(200, {"id": "x", "object": kind, "model": request["model"], "choices": [choice]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(delta: dict[str, Any] | str, finish: str | None = None) -> None:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = delta
                document = {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "model": request["model"],
                    "choices": [choice],
                }
            else:
                choice["text"] = delta
                document = {
                    "id": "x",
                    "object": "text_completion",
                    "model": request["model"],
                    "choices": [choice],
                }
            self._chunk(b"data: " + json.dumps(document).encode() + b"\n\n")

        if chat:
            event({"role": "assistant"})  # the first chunk names the role and carries no text
        for index, word in enumerate(words):
            time.sleep(max(0.0, began + (FIRST_MS + index * STEP_MS) / 1000 - time.perf_counter()))
            event({"content": word} if chat else word)
        event({} if chat else "", "length")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


@pytest.fixture(scope="module")
def openai_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _run(url: str, tokenizer: Path, *extra: str) -> Any:
    return run_perf(
        "-m", "tiny", "-u", url, "--tokenizer", str(tokenizer), "--synthetic-input-tokens-mean", "30",
        "--output-tokens-mean", "8", "--request-count", "4", "--json", *extra,
    )  # fmt: skip


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_openai_answers_are_measured_from_their_text(
    endpoint: str, openai_server: str, tokenizer_path: Path
) -> None:
    OpenAIHandler.received.clear()
    run = _run(openai_server, tokenizer_path, "--endpoint-type", endpoint, "--streaming",
               "--output-tokens-mean-deterministic", "--extra-inputs", "temperature:0")  # fmt: skip
    assert run.returncode == 0, run
    level = run.report["levels"][0]
    assert level["request_count"]["avg"] == 4 and level["output_sequence_length"]["avg"] == 8
    assert level["input_sequence_length"]["avg"] == 30
    # The role-only first chunk carries no text: TTFT is the first word's, not that chunk's.
    assert FIRST_MS <= level["time_to_first_token"]["p50"] < FIRST_MS + 25, level
    assert STEP_MS - 2 < level["inter_token_latency"]["p50"] < STEP_MS + 4, level
    body = OpenAIHandler.received[-1]
    assert body["path"] == ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")
    assert body["model"] == "tiny" and body["stream"] is True and body["max_tokens"] == 8
    assert body["min_tokens"] == 8 and body["ignore_eos"] is True and body["temperature"] == 0
    if endpoint == "chat":
        assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"]
    else:
        assert isinstance(body["prompt"], str) and body["prompt"]


def test_openai_by_service_kind_unstreamed(openai_server: str, tokenizer_path: Path) -> None:
    run = _run(openai_server, tokenizer_path, "--service-kind", "openai")
    assert run.returncode == 0, run
    assert run.report["endpoint_type"] == "chat" and run.report["streaming"] is False
    level = run.report["levels"][0]
    assert level["output_sequence_length"]["avg"] == 8
    assert level["time_to_first_token"]["avg"] == level["request_latency"]["avg"]


def test_openai_errors_are_reported_in_the_servers_words(openai_server: str, tokenizer_path: Path) -> None:
    run = run_perf(
        "-m", "tiny", "-u", openai_server, "--tokenizer", str(tokenizer_path), "--endpoint-type", "chat",
        "--streaming", "--output-tokens-mean", "100", "--request-count", "2",
        "--synthetic-input-tokens-mean", "8",
    )  # fmt: skip
    assert run.returncode == 4, run
    assert "no request succeeded (HTTP 400: max_tokens 100 is too large)" in run.stderr
