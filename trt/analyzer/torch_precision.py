"""FP16 variants of TorchScript models: the weights in half precision inside a scripted wrapper that
casts floating inputs to half and the outputs back to float, so the config and clients do not change.

Only ``forward(Tensor, ...) -> Tensor | Tuple[Tensor, ...]`` signatures can be wrapped. INT8 is not
offered: torch's dynamic quantization works on eager modules, and a ``model.pt`` holds only TorchScript."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _signature(module: Any) -> tuple[list[str], int | None]:
    """Argument names of ``forward``, and how many tensors it returns (None: one tensor)."""
    schema = module.forward.schema
    arguments = schema.arguments[1:]
    if not arguments or any(str(a.type) != "Tensor" for a in arguments):
        raise ValueError("forward() must take tensors only")
    if len(schema.returns) != 1:
        raise ValueError("forward() must return one value")
    returned = schema.returns[0].type
    if returned.kind() == "TensorType":
        return [a.name for a in arguments], None
    if returned.kind() == "TupleType" and all(e.kind() == "TensorType" for e in returned.elements()):
        return [a.name for a in arguments], len(returned.elements())
    raise ValueError(f"forward() returns {returned}; only a tensor or a tuple of tensors can be wrapped")


def make_fp16_variant(source: Path, destination: Path) -> None:
    import torch

    inner = torch.jit.load(str(source), map_location="cpu").eval()
    names, returned = _signature(inner)
    arguments = ", ".join(f"{name}: torch.Tensor" for name in names)
    casts = ", ".join(f"{name}.half() if {name}.is_floating_point() else {name}" for name in names)
    if returned is None:
        body = f"        return self.inner({casts}).float()\n"
        annotation = "torch.Tensor"
    else:
        items = ", ".join(f"out[{i}].float()" for i in range(returned))
        body = f"        out = self.inner({casts})\n        return ({items},)\n"
        annotation = f"Tuple[{', '.join(['torch.Tensor'] * returned)}]"
    source_text = (
        "import torch\nfrom typing import Tuple\n\n"
        "class HalfPrecision(torch.nn.Module):\n"
        "    def __init__(self, inner: torch.nn.Module) -> None:\n"
        "        super().__init__()\n"
        "        self.inner = inner\n\n"
        f"    def forward(self, {arguments}) -> {annotation}:\n" + body
    )
    namespace: dict[str, Any] = {}
    # torch.jit.script reads a class's source from its file: write the wrapper where it can be read.
    module_file = destination.parent / "_half_precision_wrapper.py"
    destination.parent.mkdir(parents=True, exist_ok=True)
    module_file.write_text(source_text)
    exec(compile(source_text, str(module_file), "exec"), namespace)
    wrapper = namespace["HalfPrecision"](inner.half())
    torch.jit.script(wrapper).save(str(destination))
    module_file.unlink()
