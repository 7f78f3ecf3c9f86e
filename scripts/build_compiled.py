"""A copy of this checkout with the compiled request path built in place, for side-by-side runs.

    python scripts/build_compiled.py DEST     # then: PYTHONPATH=DEST python -m trt serve ...

Copies ``trt/``, ``setup.py`` and ``pyproject.toml`` to DEST (which must not exist yet) and runs
``setup.py build_ext --inplace`` with ``TRT_COMPILE=1``: mypyc compiles the modules that
``trt/server/compiled.py`` names, beside their sources in the copy. Needs mypy and a C compiler.
Prints the modules the copy runs compiled; exits non-zero if the build fails or any is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_compiled_copy(dest: Path) -> list[str]:
    """Build the copy; the modules it runs compiled (checked in a fresh interpreter)."""
    dest.mkdir(parents=True)
    shutil.copytree(ROOT / "trt", dest / "trt", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, dest / name)
    env = {**os.environ, "TRT_COMPILE": "1"}
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if build.returncode != 0:
        raise RuntimeError(f"the compiled build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}")
    shutil.rmtree(dest / "build", ignore_errors=True)  # the objects; the extensions sit in trt/
    probe = subprocess.run(
        [sys.executable, "-c", "from trt.server.compiled import compiled_modules as c; print(*c())"],
        cwd=dest, env={**os.environ, "PYTHONPATH": str(dest)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return probe.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    if args.dest.exists():
        raise SystemExit(f"{args.dest} exists: give a new folder")
    sys.path.insert(0, str(ROOT))
    from trt.server.compiled import COMPILED_MODULES

    compiled = build_compiled_copy(args.dest)
    for name in COMPILED_MODULES:
        print(f"{'compiled' if name in compiled else 'MISSING '}  {name}")
    if set(compiled) != set(COMPILED_MODULES):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
