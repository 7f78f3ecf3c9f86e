#!/usr/bin/env bash
# The checks that need an NVIDIA GPU host, which CI is not: the GPU tests (CUDA torch models served
# and called with tritonclient, the nv_gpu_* metrics against NVML, ONNX Runtime's CUDA provider where
# onnxruntime-gpu is installed, CUDA shared memory from tritonclient and trt perf), trt analyze with
# GPU candidates, and, given perf_analyzer, the front-end worker scaling benchmark on all the host's cores.
#
#   scripts/gpu_check.sh OUT_DIR [PERF_ANALYZER]
#
# Each step runs under its own time limit and the next one runs whatever the last gave; the exit status
# is that of the GPU tests. Results land in OUT_DIR (the tests' JUnit XML, trt analyze's report, the
# scaling benchmark's JSON and CSV).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [PERF_ANALYZER]}
perf_analyzer=${2:-}
python=${PYTHON:-python3}
mkdir -p "$out"
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "machine"
nvidia-smi -L
echo "cores: $(nproc)"
$python - <<'EOF'
import sys

import google.protobuf
import grpc
import onnxruntime
import torch

print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.device_count(), "| onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers(),
      "| grpcio", grpc.__version__, "| protobuf", google.protobuf.__version__)
EOF

step "GPU tests"
# addopts replaced: serially, and whether or not the host has pytest-xdist (pyproject's -n needs it).
timeout 300 $python -m pytest -q -rs -o addopts=--import-mode=importlib -p no:cacheprovider \
    --junitxml "$out/gpu_tests.xml" \
    tests/server/backends/test_pytorch_gpu.py tests/server/test_metrics_gpu.py \
    tests/server/backends/test_onnxruntime_gpu.py tests/server/core/extensions/test_cuda_shared_memory_gpu.py \
    tests/perf/test_cuda_shared_memory_gpu.py
tests=$?

step "trt analyze with GPU candidates (torch_mlp)"
timeout 180 $python -m trt analyze torch_mlp --kind gpu,cpu --instances 1,2 --max-batch-size 32 \
    --precision fp32,fp16 --max-gpu-memory 8GB --max-duration 60s -p 500 --quiet --fresh \
    --output-dir "$out/analyze"

if [ -n "$perf_analyzer" ]; then
    step "front-end workers on $(nproc) cores"
    timeout 400 $python benchmarks/frontend_scaling.py --perf-analyzer "$perf_analyzer" \
        --workers "${WORKERS:-0,1,2,4,8}" --rounds "${ROUNDS:-1}" --pin --concurrency "${CONCURRENCY:-64}" \
        --interval-ms 2000 --json "$out/frontend_scaling.json"
fi
step "done"
exit $tests
