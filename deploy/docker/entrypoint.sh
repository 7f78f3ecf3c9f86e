#!/bin/sh
# The images' entry point. SageMaker starts a container as `IMAGE serve` with nothing else: that runs
# SageMaker's contract (deploy/sagemaker/serve). Anything else is a trt command line (`serve ...`,
# `repo ...`, `perf ...`).
set -eu
if [ "$#" -eq 1 ] && [ "$1" = "serve" ]; then
    exec sagemaker-serve
fi
exec trt "$@"
