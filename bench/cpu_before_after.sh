#!/bin/bash
# Before / after: two kiln binaries (KILN_BEFORE, KILN_AFTER) and onnxruntime, interleaved rounds,
# kiln bench medians (ms) and bench/cpu_one_session.py (us); torchvision exports under MODELS.
cd "$(dirname "$0")/.." && MODELS=${MODELS:-/tmp/tq/tv} && KILN_BEFORE=${KILN_BEFORE:?a kiln binary} && KILN_AFTER=${KILN_AFTER:-build/src/kiln}
for round in 1 2 3; do for m in resnet50 mobilenet_v2 efficientnet_b0; do for t in 1 2; do
 b=$("$KILN_BEFORE" bench "$MODELS/$m.onnx" --threads $t 2>&1 | grep 'latency ms' | awk '{print $8}')
 a=$("$KILN_AFTER" bench "$MODELS/$m.onnx" --threads $t 2>&1 | grep 'latency ms' | awk '{print $8}')
 o=$(python3 bench/cpu_one_session.py ort "$MODELS/$m.onnx" --input input=1,3,224,224 --threads $t --reps 30 --rounds 3 2>&1 | tail -1)
 echo "round $round $m t$t before $b after $a ort_us $o"
done; done; done
