"""Generate the Python modules for Triton's wire contract from ``protos/*.proto``.

    python scripts/generate_protos.py           # regenerate into trt/protos/
    python scripts/generate_protos.py --check   # exit 1 if the committed modules are stale

grpc_tools writes ``import model_config_pb2`` for imports between the files; the modules live in
the ``trt.protos`` package, so those lines are rewritten to ``from trt.protos import ...``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[1] / "trt" / "protos"
PROTO_FILES = ("model_config.proto", "grpc_service.proto", "health.proto")
_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generated_files(out_dir: Path) -> list[Path]:
    return sorted(p for p in out_dir.iterdir() if re.fullmatch(r"\w+_pb2(_grpc)?\.pyi?", p.name))


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_DIR / name) for name in PROTO_FILES),
    ]
    # In a process of its own: protoc is native code, and it once crashed (SIGSEGV) a test worker that
    # had torch, grpc and their threads loaded beside it.
    if subprocess.run([sys.executable, "-m", *args], check=False).returncode != 0:
        raise SystemExit("protoc failed")
    files = generated_files(out_dir)
    for path in files:
        text = path.read_text()
        text = _IMPORT.sub(r"from trt.protos import \1 as \2", text)
        text = re.sub(r"^import (\w+_pb2)$", r"from trt.protos import \1", text, flags=re.MULTILINE)
        path.write_text(text)
    return files


def stale_files() -> list[str]:
    """Names of generated files that differ from (or are missing in) trt/protos/."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [
            p.name
            for p in fresh
            if not (PROTO_DIR / p.name).exists() or (PROTO_DIR / p.name).read_text() != p.read_text()
        ]
        fresh_names = {p.name for p in fresh}
        stale += [p.name for p in generated_files(PROTO_DIR) if p.name not in fresh_names]
    return sorted(stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: trt/protos/{name} (run python scripts/generate_protos.py)")
        if stale:
            # The modules embed the generator's version: a different grpcio-tools marks every file stale.
            print(f"(made here with grpcio-tools {_tools_version()}; pyproject.toml pins the one to use)")
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate(Path(tmp)):
            shutil.copyfile(path, PROTO_DIR / path.name)
            print(f"wrote trt/protos/{path.name}")
    return 0


def _tools_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpcio-tools")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
