"""Every file a model config names must lie inside the model's folder (``core.paths``' rule).

Checked as soon as a config is read, before auto-complete or a backend opens anything: the model file
(``default_model_filename``, ``cc_model_filenames``), label files, warm-up and initial-state data files,
and the files the checksum repository agent digests.
Triton refuses a ``label_filename`` outside the model folder the same way. ``EXECUTION_ENV_PATH`` and
``model_operations`` may name files anywhere when the operator wrote them in ``config.pbtxt`` (shared
conda-pack environments, custom op libraries, as Triton allows), but not in a config a client sends
with a load request: there they must be inside the model folder too.
"""

from __future__ import annotations

from collections.abc import Iterator

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError
from trt.server.core.models.repository_agents import CHECKSUM_AGENT, checksum_files
from trt.server.core.paths import escape_problem, relative_path_problem, shown

MODEL_DIRECTORY_TOKEN = "$$TRITON_MODEL_DIRECTORY"


def check_config_paths(config: model_config_pb2.ModelConfig, from_client: bool = False) -> None:
    """Raise the first file name of ``config`` that leaves the model folder."""
    for problem in config_path_problems(config, from_client):
        raise problem


def config_path_problems(
    config: model_config_pb2.ModelConfig, from_client: bool = False
) -> Iterator[ModelConfigError]:
    # A client's config meets the strict rule; the operator's own, containment after '.' and '..'.
    problem = relative_path_problem if from_client else escape_problem
    for field, value, folder in _named_files(config, from_client):
        reason = problem(value)
        if reason is not None:
            yield ModelConfigError(
                f"{field} '{shown(value)}' leads outside {folder} (found {reason}); it must be inside "
                f"{folder}",
                field,
            )


def _named_files(config: model_config_pb2.ModelConfig, from_client: bool) -> Iterator[tuple[str, str, str]]:
    """(field, path, the folder it is relative to) for every file ``config`` names."""
    model, version = "the model folder", "the version folder"
    if config.default_model_filename:
        yield "default_model_filename", config.default_model_filename, version
    for capability, filename in sorted(config.cc_model_filenames.items()):
        yield f"cc_model_filenames[{capability}]", filename, version
    for output in config.output:
        if output.label_filename:
            yield f"output[{output.name}].label_filename", output.label_filename, model
    for index, warmup in enumerate(config.model_warmup):
        for name, spec in sorted(warmup.inputs.items()):
            if spec.HasField("input_data_file"):
                field = f"model_warmup[{index}].inputs[{name}].input_data_file"
                yield field, spec.input_data_file, "warmup/"
    for agent in config.model_repository_agents.agents:
        if agent.name == CHECKSUM_AGENT:
            for key, path in checksum_files(agent):
                yield f"model_repository_agents[{CHECKSUM_AGENT}].parameters[{shown(key)}]", path, model
    for state in config.sequence_batching.state:
        for initial in state.initial_state:
            if initial.HasField("data_file"):
                field = f"sequence_batching.state[{state.input_name}].initial_state.data_file"
                yield field, initial.data_file, "initial_state/"
    if not from_client:
        return
    for index, library in enumerate(config.model_operations.op_library_filename):
        yield f"model_operations.op_library_filename[{index}]", library, model
    environment = config.parameters.get("EXECUTION_ENV_PATH")
    if environment is not None and environment.string_value:
        value = environment.string_value
        if value.startswith(MODEL_DIRECTORY_TOKEN + "/"):
            value = value[len(MODEL_DIRECTORY_TOKEN) + 1 :]
        yield "parameters[EXECUTION_ENV_PATH]", value, f"the model folder ({MODEL_DIRECTORY_TOKEN}/...)"
