"""The build. Its settings live in pyproject.toml; this file only adds the optional compiled request
path: with ``TRT_COMPILE=1``, mypyc compiles the modules that ``trt/server/compiled.py`` names to C
extensions (a C compiler is needed). Without it the build is pure Python, as before.

    TRT_COMPILE=1 pip install .                                  # an isolated build fetches mypy
    TRT_COMPILE=1 pip install --no-build-isolation -e .          # in place: mypy must be installed
"""

from __future__ import annotations

import os
import runpy
import shutil
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
MYPY = "mypy>=1.18"  # mypyc, which comes with mypy
COMPILE = os.environ.get("TRT_COMPILE") == "1"
# Each kind of build in a folder of its own, so that neither puts the other's files in a wheel.
BUILD = HERE / "build" / ("compiled" if COMPILE else "pure")


def _extensions() -> list[object]:
    if not COMPILE:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # asking the build for its requirements: setup_requires brings mypy first
        return []
    shutil.rmtree(BUILD, ignore_errors=True)  # no extension of an earlier module list lingers
    modules = runpy.run_path(str(HERE / "trt" / "server" / "compiled.py"))["COMPILED_MODULES"]
    paths = [name.replace(".", "/") + ".py" for name in modules]
    # One group, named inside the package: its shared library then lies in trt/ rather than at the
    # top level, where an installed (or editable) trt could not import it.
    return list(
        mypycify(paths, opt_level="3", group_name="trt.server._compiled", target_dir=str(BUILD / "mypyc"))
    )


setup(
    ext_modules=_extensions(),
    setup_requires=[MYPY] if COMPILE else [],
    options={"build": {"build_base": str(BUILD)}},
)
