"""The model's configuration as a model reads it (``args["model_config"]``, parsed), and
``pb_utils.ModelConfig``, what ``TritonPythonModel.auto_complete_config`` receives and returns."""

from __future__ import annotations

from typing import Any


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    configs: list[dict[str, Any]] = model_config.get("input", [])
    for config in configs:
        if config.get("name") == name:
            return config
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    configs: list[dict[str, Any]] = model_config.get("output", [])
    for config in configs:
        if config.get("name") == name:
            return config
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """What ``TritonPythonModel.auto_complete_config`` receives and returns."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self._config = model_config

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current} is larger than "
                f"the requested {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._config:
            raise ValueError("configuration specifies sequence_batching; cannot set dynamic batching")
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def set_model_transaction_policy(self, transaction_policy: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy)

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{kind} {tensor} is missing '{key}'")
        existing = self._config.setdefault(kind, [])
        for item in existing:
            if item.get("name") == tensor["name"]:
                for key in ("data_type", "dims"):
                    ours, theirs = item.get(key), tensor[key]
                    if ours and (list(ours) if key == "dims" else ours) != (
                        list(theirs) if key == "dims" else theirs
                    ):
                        raise ValueError(f"{kind} '{tensor['name']}': {key} {theirs} conflicts with {ours}")
                item.update({k: v for k, v in tensor.items() if not item.get(k)})
                return
        existing.append(dict(tensor))
