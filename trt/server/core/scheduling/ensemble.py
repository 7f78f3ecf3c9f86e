"""Ensembles (``platform: "ensemble"``): a pipeline of other models, run as a graph inside the server.

Each step names a model and maps its inputs and outputs to ensemble tensors (``input_map`` key: the
step model's input, value: the ensemble tensor; ``output_map`` key: the step model's output, value:
the ensemble tensor). A step runs once every tensor it needs exists, so independent steps run at
the same time; intermediate tensors stay in memory and each step goes through the server's own
scheduler (its batching applies). A config whose steps do not connect is refused at load with the
tensor that nothing produces.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncGenerator, Callable, Sequence

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.backends.base import (
    BackendRequest,
    BackendResponse,
    HeldModel,
    InstanceSpec,
    ModelFiles,
    ServerServices,
)
from trt.server.core.datatypes import numpy_to_wire
from trt.server.core.errors import ModelConfigError, ServerError, Unavailable
from trt.server.core.scheduling.ordered_streams import in_order
from trt.server.core.types import InferenceRequest, InputTensor, OutputTensor, RequestedOutput

# Ensemble requests are independent: the scheduler may run this many at once.
CONCURRENT_REQUESTS = 256
# Answers of a decoupled step whose later steps run at once, per request (see ordered_streams): a
# bound on the tensors one request holds, whatever max_inflight_requests allows.
BRANCHES_IN_FLIGHT = 32


def step_order(config: model_config_pb2.ModelConfig) -> list[int]:
    """Steps in an order where each one's inputs already exist; refuses graphs that cannot run."""
    steps = list(config.ensemble_scheduling.step)
    if not steps:
        raise ModelConfigError(
            "an ensemble needs ensemble_scheduling with at least one step", "ensemble_scheduling"
        )
    available = {tensor.name for tensor in config.input}
    producers: dict[str, int] = {}
    for index, step in enumerate(steps):
        if not step.model_name:
            raise ModelConfigError(
                f"ensemble step {index} names no model_name", f"ensemble_scheduling.step[{index}]"
            )
        for tensor in step.output_map.values():
            if tensor in producers or tensor in available:
                raise ModelConfigError(
                    f"ensemble tensor '{tensor}' is produced more than once",
                    f"ensemble_scheduling.step[{index}].output_map",
                )
            producers[tensor] = index
    order: list[int] = []
    remaining = list(range(len(steps)))
    while remaining:
        ready = [i for i in remaining if all(t in available for t in steps[i].input_map.values())]
        if not ready:
            for index in remaining:
                for key, tensor in steps[index].input_map.items():
                    if tensor not in available and tensor not in producers:
                        raise ModelConfigError(
                            f"ensemble tensor '{tensor}' is consumed by step {index} "
                            f"('{steps[index].model_name}') but no ensemble input or step output produces it",
                            f"ensemble_scheduling.step[{index}].input_map[{key}]",
                        )
            names = ", ".join(f"'{steps[i].model_name}'" for i in remaining)
            raise ModelConfigError(
                f"the ensemble's steps {names} form a cycle: each waits for a tensor another produces",
                f"ensemble_scheduling.step[{remaining[0]}]",
            )
        for index in ready:
            order.append(index)
            remaining.remove(index)
            available.update(steps[index].output_map.values())
    for output in config.output:
        if output.name not in available:
            raise ModelConfigError(
                f"ensemble output '{output.name}' is not produced by any step", f"output[{output.name}]"
            )
    return order


class EnsembleBackend:
    name = "ensemble"
    platform = "ensemble"
    default_filename = ""

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """An ensemble's inputs and outputs are its own to declare; nothing to infer."""

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        step_order(config)

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> EnsembleInstance:
        if spec.services is None:
            raise ModelConfigError("ensembles need the server to run their steps")
        return EnsembleInstance(config, spec.services, files.namespace)


class EnsembleInstance:
    def __init__(
        self, config: model_config_pb2.ModelConfig, services: ServerServices, namespace: str = ""
    ) -> None:
        self._steps = list(config.ensemble_scheduling.step)
        # (model name, version) of each step: the model a request holds for it (``_hold_models``).
        self._step_models = [(step.model_name, _version(step)) for step in self._steps]
        self._namespace = namespace  # where a step's model is looked for first
        self._name = config.name
        self._outputs = [output.name for output in config.output]
        self._services = services
        step_order(config)
        # Each decoupled step, upstream first, with the steps that need what it produces.
        self._downstream = _decoupled_steps(self._steps, services)
        self._decoupled = list(self._downstream)
        # max_inflight_requests: each step's requests in flight, over every request of the
        # ensemble (for a decoupled step, until its last answer), as Triton bounds them.
        limit = config.ensemble_scheduling.max_inflight_requests
        self._step_slots = [asyncio.Semaphore(limit) for _ in self._steps] if limit else None
        if self._decoupled:
            # As in Triton, an ensemble over a decoupled model is decoupled: one response of the
            # ensemble for each response of its last decoupled step, each run through the steps
            # after it (a decoupled step after another runs once per response of the first).
            config.model_transaction_policy.decoupled = True

    async def execute_requests(self, requests: list[BackendRequest]) -> list[BackendResponse]:
        return list(await asyncio.gather(*(self._answer(request) for request in requests)))

    async def _answer(self, request: BackendRequest) -> BackendResponse:
        try:
            models = self._hold_models()
        except ServerError as exc:
            if request.on_response is None:
                return _failed(self._name, exc)
            request.on_response(_failed(self._name, exc), True)
            return BackendResponse({})
        try:
            if request.on_response is None:
                return await self._run(request, models)
            if not self._decoupled:  # a decoupled ensemble without a decoupled step: one response
                response = await self._run(request, models)
                request.on_response(response, True)
                return BackendResponse({})
            await self._stream(request, request.on_response, models)
            return BackendResponse({})
        finally:
            for model in dict.fromkeys(models):
                model.release()

    def _hold_models(self) -> list[HeldModel]:
        """The version of each step's model this request runs, held until it ends: as in Triton,
        unloading or reloading one of them meanwhile lets the request finish on what it began with."""
        held: dict[tuple[str, str], HeldModel] = {}
        try:
            for name, version in self._step_models:
                if (name, version) not in held:
                    held[name, version] = self._services.hold_model(name, version, self._namespace)
        except BaseException:
            for model in held.values():
                model.release()
            raise
        return [held[key] for key in self._step_models]

    async def _run(self, request: BackendRequest, models: Sequence[HeldModel]) -> BackendResponse:
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        try:
            await self._run_steps(range(len(self._steps)), tensors, request, models)
        except ServerError as exc:
            return _failed(self._name, exc)
        return BackendResponse({name: tensors[name] for name in request.requested_outputs or self._outputs})

    async def _stream(
        self,
        request: BackendRequest,
        respond: Callable[[BackendResponse | None, bool], None],
        models: Sequence[HeldModel],
    ) -> None:
        """Each set of tensors the steps produce (one per response of the last decoupled step) goes
        out as a response of the ensemble. A cancelled request stops at once: the steps still
        running for its answers are cancelled, as nobody reads them."""
        work = asyncio.ensure_future(self._respond_each(request, respond, models))
        request.on_cancel = work.cancel
        try:
            await work
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this execution itself is cancelled (the server stops)
            respond(None, True)  # the request was: its stream ends, though nobody may read it
        finally:
            request.on_cancel = None

    async def _respond_each(
        self,
        request: BackendRequest,
        respond: Callable[[BackendResponse | None, bool], None],
        models: Sequence[HeldModel],
    ) -> None:
        names = request.requested_outputs or self._outputs
        try:
            branches = self._branches(list(range(len(self._steps))), dict(request.inputs), request, models)
            async with contextlib.aclosing(branches):
                async for tensors in branches:
                    respond(BackendResponse({name: tensors[name] for name in names}), False)
        except ServerError as exc:
            respond(_failed(self._name, exc), True)
            return
        respond(None, True)

    async def _branches(
        self,
        steps: list[int],
        tensors: dict[str, np.ndarray],
        request: BackendRequest,
        models: Sequence[HeldModel],
    ) -> AsyncGenerator[dict[str, np.ndarray], None]:
        """Run ``steps`` over ``tensors``. The steps before the first decoupled one run once; each
        response of that step then runs the steps after it on a copy of the tensors (recursively:
        they may hold the next decoupled step). Yields the tensors of every branch that ends."""
        first = next((index for index in self._decoupled if index in steps), None)  # upstream first
        if first is None:
            await self._run_steps(steps, tensors, request, models)
            yield tensors
            return
        after = self._downstream[first] & set(steps)
        before = [index for index in steps if index not in after and index != first]
        await self._run_steps(before, tensors, request, models)
        async with self._slot(first):
            answers = self._answer_branches(first, sorted(after), tensors, request, models)
            async for done in in_order(answers, BRANCHES_IN_FLIGHT):
                yield done

    async def _answer_branches(
        self,
        first: int,
        after: list[int],
        tensors: dict[str, np.ndarray],
        request: BackendRequest,
        models: Sequence[HeldModel],
    ) -> AsyncGenerator[AsyncGenerator[dict[str, np.ndarray], None], None]:
        """For each answer of decoupled step ``first``, the run of the steps ``after`` it over a
        copy of ``tensors`` with that answer's outputs (``in_order`` runs them side by side)."""
        step = self._steps[first]
        # Not traced: streamed requests are not (the steps after it are, one trace per response).
        step_request = _step_request(step, tensors, request, self._namespace)
        async with contextlib.aclosing(models[first].infer_stream(step_request)) as answers:
            async for item in answers:
                if request.cancelled:
                    break  # nobody reads on; closing the stream tells the step
                if item.error is not None:
                    raise item.error if isinstance(item.error, ServerError) else ServerError(str(item.error))
                if item.response is None:
                    continue
                branch = dict(tensors)
                _take_outputs(step, item.response.outputs, branch)
                yield self._branches(after, branch, request, models)

    def _slot(self, step: int) -> contextlib.AbstractAsyncContextManager[object]:
        """One of the step's ``max_inflight_requests``, held while its request runs."""
        if self._step_slots is None:
            return contextlib.nullcontext()
        return self._step_slots[step]

    async def _run_steps(
        self,
        steps: Sequence[int],
        tensors: dict[str, np.ndarray],
        request: BackendRequest,
        models: Sequence[HeldModel],
    ) -> None:
        """Run ``steps`` (indices) as a graph over ``tensors`` (which they add to): each once its
        inputs exist."""
        if len(steps) == 1:  # a branch after a decoupled step, mostly: nothing to wait for
            await self._run_step(steps[0], tensors, request, models)
            return
        produced = {name: asyncio.Event() for i in steps for name in self._steps[i].output_map.values()}

        async def run_step(index: int) -> None:
            for tensor in self._steps[index].input_map.values():
                if tensor not in tensors:  # another of these steps produces it
                    await produced[tensor].wait()
            for tensor in await self._run_step(index, tensors, request, models):
                produced[tensor].set()

        tasks = [asyncio.ensure_future(run_step(step)) for step in steps]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def _run_step(
        self, index: int, tensors: dict[str, np.ndarray], request: BackendRequest, models: Sequence[HeldModel]
    ) -> list[str]:
        """Run step ``index`` on ``tensors``, add its outputs to them; the names it added."""
        step = self._steps[index]
        step_request = self._traced_step_request(step, tensors, request)
        try:
            async with self._slot(index):
                response = await models[index].infer(step_request)
        finally:
            if step_request.trace is not None:
                self._services.tracer.finish(step_request.trace)
        return _take_outputs(step, response.outputs, tensors)

    def _traced_step_request(
        self,
        step: model_config_pb2.ModelEnsembling.Step,
        tensors: dict[str, np.ndarray],
        request: BackendRequest,
    ) -> InferenceRequest:
        """A step's request; traced, as a child of the ensemble's trace, when the ensemble's is."""
        step_request = _step_request(step, tensors, request, self._namespace)
        if request.trace is not None:
            tracer = self._services.tracer
            step_request.trace = tracer.child(request.trace, step.model_name, _version(step), request.id)
        return step_request

    async def aclose(self) -> None:
        pass

    def close(self) -> None:
        pass


def _failed(ensemble: str, exc: ServerError) -> BackendResponse:
    """A step's error as the ensemble's answer, in Triton's words (its ensemble scheduler's)."""
    return BackendResponse({}, error=type(exc)(f"in ensemble '{ensemble}', {exc.message}"))


def _step_request(
    step: model_config_pb2.ModelEnsembling.Step,
    tensors: dict[str, np.ndarray],
    request: BackendRequest,
    namespace: str,
) -> InferenceRequest:
    inputs = [
        InputTensor(
            model_input, numpy_to_wire(tensors[tensor].dtype), tuple(tensors[tensor].shape), tensors[tensor]
        )
        for model_input, tensor in step.input_map.items()
    ]
    outputs = [RequestedOutput(name) for name in step.output_map]
    return InferenceRequest(
        step.model_name, _version(step), request.id, inputs, outputs, dict(request.parameters),
        model_namespace=namespace,
    )  # fmt: skip


def _version(step: model_config_pb2.ModelEnsembling.Step) -> str:
    """The version a step names, as a request gives it ("" for the model's policy to choose)."""
    return "" if step.model_version in (-1, 0) else str(step.model_version)


def _take_outputs(
    step: model_config_pb2.ModelEnsembling.Step,
    outputs: Sequence[OutputTensor],
    tensors: dict[str, np.ndarray],
) -> list[str]:
    """Put a step's outputs into ``tensors`` under their ensemble names; the names it filled."""
    by_name = {output.name: output.data for output in outputs}
    filled = []
    for model_output, tensor in step.output_map.items():
        data = by_name.get(model_output)
        if data is None:
            raise Unavailable(f"ensemble step '{step.model_name}' returned no '{model_output}'")
        tensors[tensor] = data
        filled.append(tensor)
    return filled


def _decoupled_steps(
    steps: Sequence[model_config_pb2.ModelEnsembling.Step], services: ServerServices
) -> dict[int, set[int]]:
    """The steps whose models are decoupled (among the models loaded so far), upstream first, each
    with the steps downstream of it. They must form a chain, each fed by the one before it: two side
    by side would each answer any number of times, and there is no telling which answer of one goes
    with which of the other."""
    found = []
    for index, step in enumerate(steps):
        try:
            decoupled = services.model_config(
                step.model_name, _version(step)
            ).model_transaction_policy.decoupled
        except ServerError:
            continue  # not loaded yet: its own load says whether it works
        if decoupled:
            found.append(index)
    downstream = {index: _downstream(steps, index) for index in found}
    found.sort(key=lambda index: -len(downstream[index]))  # upstream ones feed more steps
    for upstream, later in itertools.pairwise(found):
        if later not in downstream[upstream]:
            raise ModelConfigError(
                f"ensemble steps '{steps[upstream].model_name}' and '{steps[later].model_name}' are "
                "both decoupled and neither feeds the other; an ensemble streams through decoupled "
                "steps one after another only",
                "ensemble_scheduling",
            )
    return {index: downstream[index] for index in found}


def _downstream(steps: Sequence[model_config_pb2.ModelEnsembling.Step], source: int) -> set[int]:
    """The steps that need, directly or not, a tensor that step ``source`` produces."""
    tainted = set(steps[source].output_map.values())
    after: set[int] = set()
    changed = True
    while changed:
        changed = False
        for index, step in enumerate(steps):
            if index != source and index not in after and tainted & set(step.input_map.values()):
                after.add(index)
                tainted |= set(step.output_map.values())
                changed = True
    return after


def instance_copies(instance: EnsembleInstance) -> Sequence[EnsembleInstance]:
    """The same stateless instance, listed so that many ensemble requests run concurrently."""
    return [instance] * CONCURRENT_REQUESTS
