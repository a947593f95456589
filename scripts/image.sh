#!/usr/bin/env bash
# Build the serving image, and smoke-test it the way Vertex AI runs it.
#
#   bash scripts/image.sh build [cpu|cuda]   build localhost/vertex-llama:VARIANT (default cpu)
#   bash scripts/image.sh smoke [cpu|cuda]   build it if needed, then run tests/image/ against it
#   bash scripts/image.sh tool               print the container tool this machine uses
#
# The tool is docker where a daemon answers, else buildah (installed from Debian where apt-get is at
# hand), else podman: buildah runs the image with chroot isolation, which works in sandboxes where podman's
# OCI runtime cannot set a container's limits (agent mode's tests install podman for its runtime). Where BASE_IMAGE (debian:bookworm-slim) cannot be pulled, an
# equivalent is made from Debian's packages with mmdebstrap (a minbase bookworm with the slim image's
# dpkg exclusions) and used in its place, and the log says so. Behind a TLS-inspecting proxy the
# machine's CA bundle (CA_BUNDLE, default /etc/ssl/certs/ca-certificates.crt) is mounted into the
# build for pip (PIP_CERT; podman and buildah: docker users give their daemon the proxy's CA).
# A build is skipped when the image carries the hash of its inputs already (FORCE=1 builds anyway).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
MADE_BASE="localhost/vertex-llama-base:bookworm-slim"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

log() { printf '[image] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

container_tool() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker; return; fi
  if command -v buildah >/dev/null 2>&1; then echo buildah; return; fi
  if command -v apt-get >/dev/null 2>&1; then
    log "no docker daemon or buildah: installing Debian's buildah"
    as_root apt-get update -qq >&2 && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >&2
    echo buildah
    return
  fi
  if command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1; then echo podman; return; fi
  log "no container tool: install docker, podman or buildah"
  exit 1
}

image_exists() {  # TOOL NAME
  case "$1" in
    docker) docker image inspect "$2" >/dev/null 2>&1 ;;
    *) "$1" inspect --type image "$2" >/dev/null 2>&1 ;;
  esac
}

image_label() {  # TOOL NAME LABEL
  case "$1" in
    docker|podman) "$1" image inspect --format "{{ index .Config.Labels \"$3\" }}" "$2" 2>/dev/null || true ;;
    buildah) buildah inspect --type image --format "{{ index .OCIv1.Config.Labels \"$3\" }}" "$2" 2>/dev/null || true ;;
  esac
}

# The base: pulled if a registry has it, else made from Debian's packages. Prints the name to build on.
base_image() {
  local tool=$1
  if image_exists "$tool" "$BASE_IMAGE" || "$tool" pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "$BASE_IMAGE"
    return
  fi
  log "$BASE_IMAGE cannot be pulled here: making an equivalent from Debian's packages ($MADE_BASE)"
  if image_exists "$tool" "$MADE_BASE"; then
    echo "$MADE_BASE"
    return
  fi
  command -v mmdebstrap >/dev/null 2>&1 || {
    as_root apt-get update -qq >&2 && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
  }
  local work
  work=$(mktemp -d)
  # debian:bookworm-slim is minbase with documentation, manuals and translations excluded from dpkg
  as_root mmdebstrap --variant=minbase --quiet \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >&2
  case "$tool" in
    docker|podman) "$tool" import "$work/rootfs.tar" "$MADE_BASE" >/dev/null ;;
    buildah)
      local container mount
      container=$(buildah from scratch)
      mount=$(buildah mount "$container")
      tar -C "$mount" -xf "$work/rootfs.tar"
      buildah umount "$container" >/dev/null
      buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$container"
      buildah commit -q "$container" "$MADE_BASE" >/dev/null
      buildah rm "$container" >/dev/null ;;
  esac
  rm -rf "$work"
  echo "$MADE_BASE"
}

# docker/wheels/: a wheel built here with exactly the flags the image would build with, when this
# machine's C library is the image's (Debian 12, x86-64): for cpu the one scripts/dev.sh built, for
# cuda the one scripts/gpu-check.sh prepare built (CUDA_ARCHITECTURES must be the same: set it for
# both). Else the folder is emptied, and the image compiles its own.
stage_wheel() {
  local variant=$1
  find "$ROOT/docker/wheels" -mindepth 1 ! -name README.md -delete
  local os="" wheel flags
  os=$(. /etc/os-release 2>/dev/null && echo "${ID:-}:${VERSION_ID:-}")
  if [ "$os" != "debian:12" ] || [ "$(uname -m)" != x86_64 ]; then
    log "this machine ($os $(uname -m)) is not the image's Debian 12 x86-64: the image compiles llama-cpp-python itself"
    return 0
  fi
  flags=$("${PYTHON:-python3}" "$ROOT/app/host/llama_build.py" cmake-args --target portable)
  if [ "$variant" = cpu ]; then
    wheel=$(LLAMA_CPU_TARGET=portable bash "$ROOT/scripts/dev.sh" wheel)
  else
    local built="$ROOT/.gpu-carry/wheels" arches
    arches="${CUDA_ARCHITECTURES:-75;80;89;90}"
    wheel=$(ls "$built"/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$wheel" ] || [ "$(cat "$built/../cuda-architectures" 2>/dev/null)" != "$arches" ]; then
      log "no CUDA wheel for architectures $arches from scripts/gpu-check.sh prepare: the image compiles its own (long)"
      return 0
    fi
    flags="$flags -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arches"
  fi
  cp "$wheel" "$ROOT/docker/wheels/"
  printf '%s\n' "$flags" >"$ROOT/docker/wheels/llama-cmake-args"
  log "the image installs $(basename "$wheel"), built here with the same flags"
}

# A hash of everything the build reads: a rebuild is needed only when it changes.
input_hash() {
  local variant=$1 base=$2
  (
    cd "$ROOT"
    printf '%s\n' "$variant" "$base" "${CUDA_ARCHITECTURES:-}" "${VIDEO:-false}"
    find Dockerfile .dockerignore pyproject.toml README.md app gcp scripts/cuda_toolkit.sh docker -type f ! -name '*.pyc' \
      ! -name '*.so' ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
  ) | sha256sum | cut -c1-16
}

build() {
  local variant=${1:-cpu} tool base hash name started
  tool=$(container_tool)
  name="localhost/vertex-llama:$variant"
  base=$(base_image "$tool")
  stage_wheel "$variant"
  hash=$(input_hash "$variant" "$base")
  if [ -z "${FORCE:-}" ] && [ "$(image_label "$tool" "$name" vertex-llama.inputs)" = "$hash" ]; then
    log "$name is current (inputs $hash)"
    return
  fi
  local args=(--build-arg "VARIANT=$variant" --label "vertex-llama.inputs=$hash" --tag "$name")
  [ "$base" = "$BASE_IMAGE" ] || args+=(--build-arg "BASE_IMAGE=$base")
  [ -z "${CUDA_ARCHITECTURES:-}" ] || args+=(--build-arg "CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES")
  [ -z "${VIDEO:-}" ] || args+=(--build-arg "VIDEO=$VIDEO")
  if [ "$tool" != docker ] && [ -f "$CA_BUNDLE" ]; then
    # beside the build's own bundle, which its ca-certificates package writes
    args+=(--volume "$CA_BUNDLE:/etc/build-ca.crt:ro" --build-arg PIP_CERT=/etc/build-ca.crt)
  fi
  case "$tool" in
    buildah) args=(--isolation chroot "${args[@]}") ;;
    podman) args=(--isolation chroot "${args[@]}") ;;
  esac
  log "building $name with $tool (inputs $hash)"
  started=$(date +%s)
  case "$tool" in
    buildah) buildah bud "${args[@]}" "$ROOT" >&2 ;;
    *) "$tool" build "${args[@]}" "$ROOT" >&2 ;;
  esac
  log "built $name in $(( $(date +%s) - started )) s"
  # the image this one replaced, and the build's intermediate stages, are left untagged: drop them
  case "$tool" in
    buildah) buildah rmi --prune >/dev/null 2>&1 || true ;;
    *) "$tool" image prune -f >/dev/null 2>&1 || true ;;
  esac
}

smoke() {
  local variant=${1:-cpu}
  build "$variant"
  cd "$ROOT"
  VERTEX_LLAMA_IMAGE="localhost/vertex-llama:$variant" CONTAINER_TOOL="$(container_tool)" \
    "$ROOT/.venv/bin/python" -m pytest -q tests/image
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  build) build "$@" ;;
  smoke) smoke "$@" ;;
  tool) container_tool ;;
  *)
    sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2 ;;
esac
