#!/usr/bin/env bash
# Installs Triton's perf_analyzer for bench/server/, idempotently, and prints the command line
# prefix that runs it (LD_LIBRARY_PATH=... /path/to/perf_analyzer).
#
# Where it comes from: PyPI's `perf-analyzer` is a placeholder (0.1.0, no binary). The real
# binary ships inside the manylinux `tritonclient` wheels; 2.51.0 is the newest whose binary runs
# on Debian 12 (later ones need glibc 2.38). It links libb64 (Debian libb64-0d) and the CUDA
# runtime library, which it loads but never uses without --shared-memory=cuda (PyPI
# nvidia-cuda-runtime-cu12, no GPU needed). It goes into its own venv so the newer pure-Python
# tritonclient the tests use stays as it is.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${KILN_PERF_ANALYZER_VENV:-$ROOT/build/perf_analyzer_venv}
PY=${PYTHON:-python3}

if ! dpkg-query -W -f='${Status}' libb64-0d 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libb64-0d >&2
fi
if [ ! -x "$VENV/bin/perf_analyzer" ]; then
  echo "setup_perf_analyzer: installing tritonclient 2.51.0 (perf_analyzer) into $VENV" >&2
  $PY -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --only-binary=:all: \
    "tritonclient==2.51.0" "nvidia-cuda-runtime-cu12" >&2
  # The wheel's data files lose their execute bit on install.
  chmod +x "$VENV/bin/perf_analyzer"
fi
CUDART=$(dirname "$(find "$VENV" -name 'libcudart.so.12' | head -1)")
echo "env LD_LIBRARY_PATH=$CUDART $VENV/bin/perf_analyzer"
