"""The defaults Triton writes into every model config it serves, written into ours the same way.

Triton completes a config after its backend's auto-complete (core ``NormalizeModelConfig`` and
``AutoCompleteBackendFields``): what ``/config`` shows, what a Python model's ``initialize()`` reads in
``args["model_config"]``, and what clients that read a config and send it back as a load override
carry. Tools written against Triton read these fields without checking they exist
(``version_policy``, ``default_model_filename``), so they are filled in here as Triton fills them, and
the schedulers read the same values: a preferred batch size of ``max_batch_size`` forms the batches
that none would.
"""

from __future__ import annotations

from trt.protos import model_config_pb2
from trt.server.core.backends.registry import ENSEMBLE_PLATFORM, BackendEntry, format_of
from trt.server.core.scheduling.sequence_controls import DEFAULT_IDLE_US


def fill_triton_defaults(config: model_config_pb2.ModelConfig, entry: BackendEntry) -> None:
    """Fill in what Triton fills in, each only where the config leaves it unset."""
    if not config.default_model_filename and entry.name != ENSEMBLE_PLATFORM:
        config.default_model_filename = format_of(entry, config).default_filename
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    batch = config.max_batch_size
    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size and batch > 0:
        config.dynamic_batching.preferred_batch_size.append(batch)
    if config.HasField("sequence_batching"):
        settings = config.sequence_batching
        if settings.max_sequence_idle_microseconds == 0:
            settings.max_sequence_idle_microseconds = DEFAULT_IDLE_US
        if settings.HasField("oldest") and not settings.oldest.preferred_batch_size and batch > 0:
            settings.oldest.preferred_batch_size.append(batch)
    if not config.HasField("ensemble_scheduling"):  # an ensemble has no memory of its own to pin
        if not config.optimization.HasField("input_pinned_memory"):
            config.optimization.input_pinned_memory.enable = True
        if not config.optimization.HasField("output_pinned_memory"):
            config.optimization.output_pinned_memory.enable = True
