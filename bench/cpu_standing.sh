#!/usr/bin/env bash
# Issue 15's side-by-side standing on the CPU, one process per runtime and model
# (bench/cpu_one_session.py), interleaved model by model: prints one line per round, thread
# count and model with the median microseconds a run and Kiln's ratio, then the ratios'
# geometric mean and largest.
#
#   bash bench/cpu_standing.sh fp32|bf16 ROUNDS "THREADS" MODEL...
#
# fp32: Kiln on the ONNX file, onnxruntime, OpenVINO with INFERENCE_PRECISION_HINT f32; ratio to
#       the faster peer.
# bf16: Kiln on an engine compiled with --bf16 (into $BF16_DIR, made when missing), OpenVINO at
#       its default precision (bf16 on a CPU with AVX512_BF16); ratio Kiln / OpenVINO.
# MODEL: resnet50, mobilenet_v2, efficientnet_b0 ($MODELS/NAME.onnx, bench/export_torchvision.py),
#        vit ($MODELS/vit/vit_b_16_op17.onnx, tools/models/export_models.py --only vit_b_16),
#        bert ($BERT, tools/models/export_models.py's BERT-base), encoder ($MODELS/encoder.onnx,
#        bench/export_transformer_encoder.py).
# KILN_PY: the kiln package (default build/python); OV_PATH: openvino's --target install
# (default /tmp/ovpkg); KILN: the CLI (default build/src/kiln).
set -euo pipefail
mode=$1 rounds=$2 threads=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
models=${MODELS:-/tmp/tv} bert=${BERT:-/tmp/bert/bert_op17.onnx} bf16_dir=${BF16_DIR:-/tmp/bf}
kiln_bin=${KILN:-build/src/kiln} ov_path=${OV_PATH:-/tmp/ovpkg}
one() { python3 "$here/cpu_one_session.py" "$@" 2>/dev/null | tail -1; }
ratios=()
for r in $(seq "$rounds"); do
  for t in $threads; do
    for m in "$@"; do
      case $m in
        bert)
          src=$bert reps=10
          in=(--input input_ids=1,128:int64:30522 --input attention_mask=1,128:int64
              --input token_type_ids=1,128:int64:1) ;;
        vit) src=$models/vit/vit_b_16_op17.onnx in=(--input input=1,3,224,224) reps=6 ;;
        encoder) src=$models/encoder.onnx in=(--input x=8,128,128) reps=40 ;;
        resnet50) src=$models/$m.onnx in=(--input input=1,3,224,224) reps=15 ;;
        *) src=$models/$m.onnx in=(--input input=1,3,224,224) reps=60 ;;
      esac
      common=("${in[@]}" --threads "$t" --reps "$reps" --rounds 3)
      if [ "$mode" = fp32 ]; then
        k=$(KILN_PY=${KILN_PY:-build/python} one kiln "$src" "${common[@]}")
        o=$(one ort "$src" "${common[@]}")
        v=$(PYTHONPATH=$ov_path one ov "$src" "${common[@]}" --ov-f32)
        ratio=$(python3 -c "print(round($k / min($o, $v), 3))")
        echo "r$r t$t $m kiln $k ort $o ov_f32 $v $ratio"
      else
        engine=$bf16_dir/$m.bf16.kiln
        mkdir -p "$bf16_dir"
        [ -f "$engine" ] || "$kiln_bin" compile "$src" --bf16 -o "$engine" > /dev/null
        k=$(KILN_PY=${KILN_PY:-build/python} one kiln "$engine" "${common[@]}")
        o=$(PYTHONPATH=$ov_path one ov "$src" "${common[@]}")
        ratio=$(python3 -c "print(round($k / $o, 3))")
        echo "r$r t$t $m kiln_bf16 $k ov_bf16 $o $ratio"
      fi
      ratios+=("$ratio")
    done
  done
done
python3 -c "import math, sys; r = [float(v) for v in sys.argv[1:]]
print(f'{len(r)} ratios: geometric mean {math.exp(sum(map(math.log, r)) / len(r)):.3f}, '
      f'largest {max(r):.3f}')" "${ratios[@]}"
