"""``python -m trt``: the same command line as ``trt``."""

from trt.cli.main import app

app(prog_name="trt")
