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
from collections.abc import Sequence

import numpy as np

from protos import model_config_pb2
from server.backends.base import BackendRequest, BackendResponse, InstanceSpec, ModelFiles, ServerServices
from server.core.datatypes import numpy_to_wire
from server.core.errors import ModelConfigError, ServerError, Unavailable
from server.core.types import InferenceRequest, InputTensor, RequestedOutput

# Ensemble requests are independent: the scheduler may run this many at once.
CONCURRENT_REQUESTS = 256


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
        return EnsembleInstance(config, spec.services)


class EnsembleInstance:
    def __init__(self, config: model_config_pb2.ModelConfig, services: ServerServices) -> None:
        self._steps = list(config.ensemble_scheduling.step)
        self._outputs = [output.name for output in config.output]
        self._services = services
        step_order(config)

    async def execute_requests(self, requests: list[BackendRequest]) -> list[BackendResponse]:
        return list(await asyncio.gather(*(self._run(request) for request in requests)))

    async def _run(self, request: BackendRequest) -> BackendResponse:
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        produced = {name: asyncio.Event() for step in self._steps for name in step.output_map.values()}
        for name in tensors:
            produced.setdefault(name, asyncio.Event()).set()

        async def run_step(step: model_config_pb2.ModelEnsembling.Step) -> None:
            for tensor in step.input_map.values():
                await produced[tensor].wait()
            inputs = [
                InputTensor(
                    model_input,
                    numpy_to_wire(tensors[tensor].dtype),
                    tuple(tensors[tensor].shape),
                    tensors[tensor],
                )
                for model_input, tensor in step.input_map.items()
            ]
            version = "" if step.model_version in (-1, 0) else str(step.model_version)
            outputs = [RequestedOutput(name) for name in step.output_map]
            response = await self._services.infer(
                InferenceRequest(
                    step.model_name, version, request.id, inputs, outputs, dict(request.parameters)
                )
            )
            by_name = {output.name: output.data for output in response.outputs}
            for model_output, tensor in step.output_map.items():
                data = by_name.get(model_output)
                if data is None:
                    raise Unavailable(f"ensemble step '{step.model_name}' returned no '{model_output}'")
                tensors[tensor] = data
                produced[tensor].set()

        tasks = [asyncio.ensure_future(run_step(step)) for step in self._steps]
        try:
            await asyncio.gather(*tasks)
        except ServerError as exc:
            for task in tasks:
                task.cancel()
            return BackendResponse({}, error=type(exc)(f"in ensemble step: {exc.message}"))
        return BackendResponse({name: tensors[name] for name in request.requested_outputs or self._outputs})

    async def aclose(self) -> None:
        pass

    def close(self) -> None:
        pass


def instance_copies(instance: EnsembleInstance) -> Sequence[EnsembleInstance]:
    """The same stateless instance, listed so that many ensemble requests run concurrently."""
    return [instance] * CONCURRENT_REQUESTS
