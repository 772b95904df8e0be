#!/bin/bash
# bench/results/2026-12-06f-cpu-thread-threshold.md. Interleaved: 2 threads, KILN_CPU_MIN_US_PER_THREAD 25 vs 5, onnxruntime; separate processes.
# Models: /usr/bin/python3 bench/export_torchvision.py /tmp/tq/tv NAME (mobilenet_v2, efficientnet_b0,
# resnet50); /tmp/mlp2.onnx is a 256-512-256 MLP with a free batch dim. KILN_PY: the built package.
cd "$(dirname "$0")/.."
export KILN_PY=${KILN_PY:-$PWD/build/python}
run() { # label model input reps
  for r in 1 2 3 4; do
    a=$(KILN_CPU_MIN_US_PER_THREAD=25 python3 bench/cpu_one_session.py kiln $2 --input $3 --threads 2 --reps $4 --rounds 3 2>/dev/null)
    b=$(KILN_CPU_MIN_US_PER_THREAD=5 python3 bench/cpu_one_session.py kiln $2 --input $3 --threads 2 --reps $4 --rounds 3 2>/dev/null)
    c=$(python3 bench/cpu_one_session.py ort $2 --input $3 --threads 2 --reps $4 --rounds 3 2>/dev/null)
    echo "$1 round $r: 25=$a 5=$b ort=$c"
  done
}
run mobilenet_v2 /tmp/tq/tv/mobilenet_v2.onnx input=1,3,224,224 60
run efficientnet_b0 /tmp/tq/tv/efficientnet_b0.onnx input=1,3,224,224 40
run mlp /tmp/mlp2.onnx x=8,256 300
run resnet50 /tmp/tq/tv/resnet50.onnx input=1,3,224,224 8
