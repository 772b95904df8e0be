#!/usr/bin/env bash
# Installs the real Triton Inference Server (2.51, with its Python backend) for the differential
# tests (tests/server/test_triton_diff_*.py): the `tritonserver` binary ships in the PyPI wheel
# nvidia-pytriton 0.7.0, which pip unpacks into a private folder (never the interpreter's
# site-packages: the wheel pins numpy < 2 and its own tritonclient). Idempotent; prints the folder.
#   scripts/install_triton.sh [DIR]    (default: $KILN_TRITON_HOME or ~/.cache/kiln/pytriton-0.7.0)
set -euo pipefail

DIR=${1:-${KILN_TRITON_HOME:-$HOME/.cache/kiln/pytriton-0.7.0}}
BIN="$DIR/pytriton/tritonserver/bin/tritonserver"
if [ ! -x "$BIN" ]; then
  PY=${PYTHON:-python3}
  tmp="$DIR.partial.$$"
  rm -rf "$tmp"
  # --no-deps: only the server's files are needed; the tests bring their own client.
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$tmp" \
    nvidia-pytriton==0.7.0 >&2
  rm -rf "$DIR"
  mkdir -p "$(dirname "$DIR")"
  mv "$tmp" "$DIR"
fi
echo "$DIR"
