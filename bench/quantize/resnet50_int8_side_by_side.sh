#!/usr/bin/env bash
# Static INT8 ResNet-50 on the CPU, side by side: Kiln (an engine compiled at batch 1 from the
# QDQ file `kiln quantize` wrote), onnxruntime and OpenVINO on that same QDQ file, each in its
# own process (bench/cpu_one_session.py), interleaved round by round, at 1 and 2 threads.
# Prints one line per round and runtime (median microseconds a run).
#
#   bash bench/quantize/resnet50_int8_side_by_side.sh QDQ.onnx [ROUNDS] [KILN_BIN]
#
# KILN_PY: the kiln package (default build/python); OV_PATH: where `pip install --target` put
# openvino (default /tmp/ovpkg; its numpy stays out of the other runtimes' processes).
set -euo pipefail
model=$1 rounds=${2:-3} kiln_bin=${3:-build/src/kiln}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
engine=$(mktemp --suffix .kiln)
"$kiln_bin" compile "$model" --shape input:1x3x224x224 -o "$engine" --no-verify > /dev/null
one() { python3 "$here/cpu_one_session.py" "$@" --input input=1,3,224,224 --reps 20 --rounds 3; }
for round in $(seq "$rounds"); do
  for t in 1 2; do
    k=$(KILN_PY=${KILN_PY:-build/python} one kiln "$engine" --threads "$t")
    o=$(one ort "$model" --threads "$t")
    v=$(PYTHONPATH=${OV_PATH:-/tmp/ovpkg} one ov "$model" --threads "$t")
    echo "round $round threads $t kiln $k ort $o openvino $v"
  done
done
rm -f "$engine"
