#!/usr/bin/env bash
# Static INT8 BERT-base on the CPU, side by side at batch 1 x 128 tokens: Kiln (an engine compiled
# from the QDQ file `kiln quantize` wrote), OpenVINO and onnxruntime on that same QDQ file, and
# onnxruntime on its own dynamic INT8 model (quantize_dynamic: its fastest INT8 BERT), each in its
# own process (bench/cpu_one_session.py), interleaved round by round, at 1 and 2 threads.
# Prints one line per round and runtime (median microseconds a run).
#
#   bash bench/quantize/bert_int8_side_by_side.sh QDQ.onnx ORT_DYNAMIC.onnx [ROUNDS] [KILN_BIN]
#
# KILN_PY: the kiln package (default build/python); OV_PATH: where `pip install --target` put
# openvino (default /tmp/ovpkg; its numpy stays out of the other runtimes' processes).
# KILN_BF16=1 also times an engine compiled with --bf16 (int8 products, the rest in bfloat16, as
# OpenVINO's default precision on a CPU with AVX512_BF16), as `kiln_bf16`.
set -euo pipefail
model=$1 dynamic=$2 rounds=${3:-3} kiln_bin=${4:-build/src/kiln}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
engine=$(mktemp --suffix .kiln) engine_bf16=$(mktemp --suffix .kiln)
trap 'rm -f "$engine" "$engine_bf16"' EXIT
shape=(--shape input_ids:1x128 --shape attention_mask:1x128 --shape token_type_ids:1x128)
"$kiln_bin" compile "$model" "${shape[@]}" -o "$engine" --no-verify > /dev/null
bf16=${KILN_BF16:-0}
[ "$bf16" = 0 ] || "$kiln_bin" compile "$model" "${shape[@]}" -o "$engine_bf16" --bf16 > /dev/null
one() {
  python3 "$here/cpu_one_session.py" "$@" --input input_ids=1,128:int64:30522 \
    --input attention_mask=1,128:int64 --input token_type_ids=1,128:int64:1 --reps 10 --rounds 3
}
for round in $(seq "$rounds"); do
  for t in 1 2; do
    k=$(KILN_PY=${KILN_PY:-build/python} one kiln "$engine" --threads "$t")
    kb=""
    [ "$bf16" = 0 ] || kb=" kiln_bf16 $(KILN_PY=${KILN_PY:-build/python} one kiln "$engine_bf16" --threads "$t")"
    v=$(PYTHONPATH=${OV_PATH:-/tmp/ovpkg} one ov "$model" --threads "$t")
    o=$(one ort "$model" --threads "$t")
    d=$(one ort "$dynamic" --threads "$t")
    echo "round $round threads $t kiln $k$kb openvino $v ort_qdq $o ort_dynamic $d"
  done
done
