# trt on CPU: `trt serve` as a non-root user, Triton's ports, a health check on readiness.
#   docker build -t trt-serve:cpu .
#   docker run -p 8000-8002:8000-8002 -v $PWD/model_repository:/models:ro trt-serve:cpu
#   docker run -e AWS_ENDPOINT_URL=... trt-serve:cpu serve --model-repository=s3://bucket/models
# EXTRAS picks the optional pieces baked in (torch adds the CPU build of PyTorch, about 200 MB).

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trt ./trt
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ARG EXTRAS=s3
# PyPI's torch wheels for Linux are CUDA builds: CPU builds come from PyTorch's own index.
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=wheel /wheels /wheels
# The one unpinned install is trt's own wheel, built above; its dependencies are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN wheel="$(ls /wheels/trt_serve-*.whl)" \
    && PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL}" pip install --no-cache-dir "${wheel}[${EXTRAS}]" \
    && rm -rf /wheels \
    && useradd --system --uid 1000 --user-group --create-home --home-dir /home/trt trt \
    && mkdir -p /models /var/cache/trt \
    && chown trt:trt /models /var/cache/trt
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/trt-entrypoint
COPY --chmod=0755 deploy/sagemaker/serve /usr/local/bin/sagemaker-serve

ENV TRT_CACHE_DIR=/var/cache/trt \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /home/trt
EXPOSE 8000 8001 8002 8080
# SIGTERM drains: in-flight requests finish (up to --exit-timeout-secs) before the models unload.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4).status != 200)"]
ENTRYPOINT ["trt-entrypoint"]
CMD ["serve", "--model-repository=/models"]
