#!/usr/bin/env bash
# The GPU backend on a lent NVIDIA machine, in one call (docs/GPU.md).
#
#   scripts/gpu_device_check.sh pack [BUILD_DIR] [CARRY_DIR]
#       Here, on the developer machine: builds kiln, kiln_gpu_tests and libkiln_gpu_cuda.so in
#       BUILD_DIR (default build) and packs them, with every shared library they need that a
#       stock CUDA image lacks, into CARRY_DIR (default .gpu_carry): bundle.tar.xz and a copy of
#       this script. The device machine has nvcc but none of Kiln's build dependencies (fmt,
#       protobuf, oneDNN, gtest), so it runs binaries built here.
#   bash CARRY_DIR/gpu_device_check.sh run [CARRY_DIR]
#       On the device machine: unpacks the bundle, runs the GPU tests, `kiln devices`, and the
#       copy bandwidth (through Kiln's backend, and through PyTorch on the same GPU as a
#       reference), writing everything under $OUT.
set -euo pipefail

mode=${1:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

pack() {
  local build=${1:-build} carry=${2:-.gpu_carry}
  cmake --build "$build" -j "${JOBS:-2}" --target kiln_cli kiln_gpu_tests kiln_gpu_cuda kiln_unit_tests \
    kiln_conformance kiln_serve kiln_model_check
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$carry"
  strip --strip-debug -o "$stage/bin/kiln" "$build/src/kiln"
  strip --strip-debug -o "$stage/bin/kiln_gpu_tests" "$build/tests/kiln_gpu_tests"
  strip --strip-debug -o "$stage/bin/kiln_unit_tests" "$build/tests/kiln_unit_tests"
  strip --strip-debug -o "$stage/bin/kiln_conformance" "$build/tests/kiln_conformance"
  strip --strip-debug -o "$stage/bin/kiln-serve" "$build/src/kiln-serve"
  strip --strip-debug -o "$stage/bin/kiln_model_check" "$build/tests/kiln_model_check"
  strip --strip-debug -o "$stage/lib/libkiln_gpu_cuda.so" "$build/lib/libkiln_gpu_cuda.so"
  # Everything the three need except the C and C++ runtimes, which the device's (newer) system
  # has: fmt, protobuf, oneDNN, OpenMP, image codecs and what those pull in.
  ldd "$build/src/kiln" "$build/tests/kiln_gpu_tests" "$build/tests/kiln_unit_tests" \
    "$build/lib/libkiln_gpu_cuda.so" "$build/src/kiln-serve" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  tar -C "$stage" -cJf "$carry/bundle.tar.xz" bin lib
  # The ONNX node tests of this machine's onnx (the version tests/conformance lists failures for;
  # the device's onnx ships no test data): 2 MB compressed.
  local node_dir
  node_dir=$(python3 -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')/backend/test/data
  if [ -d "$node_dir/node" ]; then tar -C "$node_dir" -cJf "$carry/onnx_node_tests.tar.xz" node; fi
  cp "$here/gpu_device_check.sh" "$here"/../bench/gpu/*.py "$carry/"
  rm -rf "$stage"
  du -sh "$carry"/*
}

run() {
  local carry=${1:-$here}
  : "${OUT:?run is for the device machine, where OUT is set}"
  # The device tool brings back only a few files: everything is written to a scratch folder and
  # handed back as one archive (results.tar.gz) when the run ends, however it ends.
  local final_out=$OUT
  local tree=$PWD  # the device's copy of the working tree (bench/, tools/)
  OUT=$(mktemp -d)
  export OUT
  # shellcheck disable=SC2064
  trap "tar -C '$OUT' -czf '$final_out/results.tar.gz' . 2>/dev/null || true" EXIT
  local root=/tmp/kiln-gpu
  rm -rf "$root" && mkdir -p "$root"
  tar -C "$root" -xJf "$carry/bundle.tar.xz"
  # The bundle's libraries for Kiln's programs only: PyTorch below keeps the system's.
  local libs="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Each of Kiln's programs under a time limit (KILN_GPU_STEP_TIMEOUT seconds, default 600), so
  # that a kernel that hangs costs one step, not the whole call.
  k() { LD_LIBRARY_PATH="$libs" timeout "${KILN_GPU_STEP_TIMEOUT:-600}" "$@"; }
  echo "== machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  uname -r
  grep -m1 PRETTY_NAME /etc/os-release || true
  echo "== missing libraries (none expected)"
  k ldd "$root/bin/kiln" "$root/bin/kiln_gpu_tests" "$root/lib/libkiln_gpu_cuda.so" |
    grep "not found" || echo none
  echo "== kiln devices"
  local status=0
  k "$root/bin/kiln" devices --require-gpu | tee "$OUT/devices.txt" || status=$?
  if [ "${KILN_GPU_QUICK:-0}" != 0 ] && [ "${KILN_GPU_HARNESS:-0}" != 0 ]; then
    echo "== every-backend harness (quick mode)"
    k env KILN_EXPECT_DEVICES=gpu "$root/bin/kiln_unit_tests" \
      --gtest_filter="${KILN_GPU_HARNESS_FILTER:-Devices/*gpu*}" --gtest_brief=1 \
      --gtest_output="xml:$OUT/backend_ops.xml" 2>&1 | tail -n 25 || status=$?
    echo "== the convolution choices of the residual cases"
    k env KILN_EXPECT_DEVICES=gpu KILN_GPU_TRACE=1 "$root/bin/kiln_unit_tests" \
      --gtest_filter='Devices/*gpu*residual*' --gtest_brief=1 2>&1 | grep -E "kiln gpu|FAIL" || true
  fi
  # ---- own GEMM (issue 11) -------------------------------------------------------------------
  # Kiln's own GEMM (gpu.own.gemm) against cuBLASLt (gpu.gemm) on ResNet-50's 1x1 convolutions
  # and BERT-base's projections as fp16 GEMMs (median ms, TFLOP/s, own/lib, max difference of
  # the two results; the block tile each shape took, from KILN_GPU_TRACE), then the harness
  # cases that run the own GEMM on the GPU, with the tile chosen by shape and with each tile
  # forced (KILN_GPU_GEMM_TILE). KILN_GPU_OWN_GEMM_TILES="128x128 128x64 64x64" also times
  # every shape with each tile forced (to check the choice; "mma": by shape without the sm_90
  # warpgroup tiles). Runs in quick mode too;
  # KILN_GPU_OWN_GEMM=0 skips it.
  # KILN_GPU_OWN_GEMM_TIMING=0: the harness cases only.
  if [ "${KILN_GPU_OWN_GEMM:-1}" != 0 ] && [ "${KILN_GPU_OWN_GEMM_TIMING:-1}" != 0 ]; then
    echo "== own GEMM vs cuBLASLt"
    k env KILN_GPU_TRACE=1 "$root/bin/kiln" devices --gemm --repeats 10 > "$OUT/own_gemm_run.txt" 2>&1 ||
      status=$?
    grep -v "^kiln gpu: gpu.own.gemm" "$OUT/own_gemm_run.txt" | tee "$OUT/own_gemm.txt"
    echo "-- tiles chosen (M N K: tile)" | tee -a "$OUT/own_gemm.txt"
    grep "^kiln gpu: gpu.own.gemm" "$OUT/own_gemm_run.txt" | sed 's/^kiln gpu: gpu.own.gemm gemm: //' |
      tee -a "$OUT/own_gemm.txt"
  fi
  if [ "${KILN_GPU_OWN_GEMM:-1}" != 0 ]; then
    # "mma": the choice by shape without the warpgroup tiles (KILN_GPU_WGMMA=0), as before them.
    for tile in ${KILN_GPU_OWN_GEMM_TILES:-}; do
      local wgmma=1
      [ "$tile" = mma ] && tile="" && wgmma=0
      echo "== own GEMM vs cuBLASLt, tile ${tile:-by shape} forced, wgmma $wgmma" |
        tee -a "$OUT/own_gemm.txt"
      k env KILN_GPU_GEMM_TILE="$tile" KILN_GPU_WGMMA="$wgmma" "$root/bin/kiln" devices --gemm \
        --repeats 10 2>&1 |
        grep -E "^ +(resnet50|bert-base|geomean|own GEMM)|own/lib" | tee -a "$OUT/own_gemm.txt" ||
        status=$?
    done
    # Every tile of gemm_tile_names (the float16 ones; float32 takes the first three), or the
    # ones KILN_GPU_OWN_GEMM_CASE_TILES names ("shape": the choice by shape).
    for tile in ${KILN_GPU_OWN_GEMM_CASE_TILES:-shape 128x128x32 128x64x32 64x64x32 128x128x64}; do
      [ "$tile" = shape ] && tile=""
      echo "== own GEMM and convolution harness cases (gpu.own.gemm, gpu.own.conv against the" \
        "reference), tile ${tile:-by shape}" | tee -a "$OUT/own_gemm.txt"
      k env KILN_EXPECT_DEVICES=gpu KILN_GPU_GEMM_TILE="$tile" "$root/bin/kiln_unit_tests" \
        --gtest_filter='Devices/*gpu_own_*' --gtest_brief=1 \
        --gtest_output="xml:$OUT/own_gemm_cases${tile:+_${tile//\//_}}.xml" 2>&1 | tail -n 25 |
        tee -a "$OUT/own_gemm.txt" || status=$?
    done
  fi
  if [ "${KILN_GPU_MMA_PEAK:-0}" != 0 ]; then
    # The ceiling of mma.sync, the own GEMM's instruction (bench/gpu/mma_peak.cu, built here).
    echo "== mma.sync peak"
    nvcc -O3 -arch=sm_90 -o "$OUT/mma_peak" "$tree/bench/gpu/mma_peak.cu" &&
      "$OUT/mma_peak" | tee "$OUT/mma_peak.txt" || status=$?
    rm -f "$OUT/mma_peak"
    # Registers, spills and shared memory of each own GEMM kernel for sm_90.
    if command -v cuobjdump > /dev/null; then
      cuobjdump --dump-resource-usage "$root/lib/libkiln_gpu_cuda.so" 2>/dev/null |
        awk '/arch = sm_90/ {on = 1} /arch = sm_80/ {on = 0} on' |
        grep -A1 "gemm_kernel" | { command -v cu++filt > /dev/null && cu++filt || cat; } \
        > "$OUT/gemm_resources.txt" || true
      wc -l "$OUT/gemm_resources.txt"
    fi
  fi
  if [ "${KILN_GPU_NCU_GEMM:-0}" != 0 ]; then
    # Nsight Compute over the own GEMM's kernels of `kiln devices --gemm` (one timed run per
    # shape after the three warm-ups; KILN_GPU_NCU_GEMM_ONLY: a label filter), clocks left alone:
    # where each shape's time goes (throughputs, occupancy, warp stalls).
    echo "== ncu: own GEMM kernels"
    k ncu --clock-control none --csv --page details --section SpeedOfLight --section Occupancy --section InstructionStats \
      --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
      -k 'regex:gemm_kernel|wgmma' --launch-count 100 \
      "$root/bin/kiln" devices --gemm --repeats 1 --gemm-runs 1 \
      --gemm-only "${KILN_GPU_NCU_GEMM_ONLY:-}" > "$OUT/ncu_gemm.csv" 2> "$OUT/ncu_gemm.err" ||
      status=$?
    tail -n 5 "$OUT/ncu_gemm.err"
    wc -l "$OUT/ncu_gemm.csv"
  fi
  # ---- end of own GEMM ---------------------------------------------------------------------
  # KILN_GPU_QUICK=1: the real models only (a second call in one session).
  if [ "${KILN_GPU_QUICK:-0}" = 0 ]; then
  echo "== GPU tests"
  k "$root/bin/kiln_gpu_tests" --gtest_output="xml:$OUT/gpu_tests.xml" || status=$?
  echo "== copy bandwidth through Kiln's backend"
  for mib in 64 1024; do
    k "$root/bin/kiln" devices --bandwidth --bandwidth-mib "$mib" --repeats 20
  done | tee "$OUT/bandwidth.txt"
  echo "== the same copies through PyTorch (reference)"
  python3 - <<'PY' | tee -a "$OUT/bandwidth.txt"
import torch
def timed(fn, reps=20):
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
for mib in (64, 1024):
    n = mib << 20
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    pageable = torch.ones(n, dtype=torch.uint8)
    dev, dev2 = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    for kind, fn in (("host->device pinned", lambda: dev.copy_(host, non_blocking=True)),
                     ("host->device pageable", lambda: dev.copy_(pageable)),
                     ("device->host pinned", lambda: host.copy_(dev, non_blocking=True)),
                     ("device->host pageable", lambda: pageable.copy_(dev)),
                     ("device->device", lambda: dev2.copy_(dev))):
        ms = timed(fn)
        print(f"  torch {mib:5d} MiB {kind:<22} {n / ms / 1e6:9.2f} GB/s  {ms:8.3f} ms")
PY
  echo "== every-backend harness: each case the GPU says it runs, run there against the reference"
  k env KILN_EXPECT_DEVICES=gpu "$root/bin/kiln_unit_tests" \
    --gtest_filter='Devices/*gpu*:FakeDevice*:BackendRegistry*' --gtest_brief=1 \
    --gtest_output="xml:$OUT/backend_ops.xml" 2>&1 | tail -n 25 || status=$?
  echo "== a model through the executor: element-wise nodes on the GPU, Conv falls back to the CPU"
  python3 - "$root" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
root = sys.argv[1]
rng = np.random.default_rng(1)
k = numpy_helper.from_array(rng.standard_normal((1, 8, 256, 256)).astype(np.float32), "k")
w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1, "w")
nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
         helper.make_node("Conv", ["r", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c", "r"], ["a"]), helper.make_node("Abs", ["a"], ["y"])]
g = helper.make_graph(nodes, "gpu_demo",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 256, 256])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 256, 256])],
                      [k, w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(m, os.path.join(root, "gpu_demo.onnx"))
x = numpy_helper.from_array(rng.standard_normal((1, 8, 256, 256)).astype(np.float32), "x")
with open(os.path.join(root, "x.pb"), "wb") as f:
    f.write(x.SerializeToString())
PY
  for dev in gpu cpu; do
    k "$root/bin/kiln" run "$root/gpu_demo.onnx" --device "$dev" --input "x=$root/x.pb" \
      --repeat 5 --output-dir "$root/out_$dev" 2>&1 | tail -n 4 || status=$?
    k "$root/bin/kiln" bench "$root/gpu_demo.onnx" --device "$dev" --input "x=$root/x.pb" \
      --iterations 50 --warmup 5 --json > "$OUT/bench_$dev.json" || status=$?
  done | tee "$OUT/model_run.txt"
  python3 - "$root" <<'PY' | tee -a "$OUT/model_run.txt"
import sys
import numpy as np
from onnx import numpy_helper, load_tensor
root = sys.argv[1]
a = numpy_helper.to_array(load_tensor(f"{root}/out_gpu/y.pb"))
b = numpy_helper.to_array(load_tensor(f"{root}/out_cpu/y.pb"))
rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
print(f"gpu vs cpu output: max abs {float(np.abs(a - b).max()):.3g}, rel L2 {rel:.3g}")
import json, os
for d in ("gpu", "cpu"):
    p50 = json.load(open(os.path.join(os.environ["OUT"], f"bench_{d}.json")))["latency_ms"]["p50"]
    print(f"kiln bench --device {d}: p50 {p50:.3f} ms")
PY
  echo "== an MLP of Gemm/Relu/MatMul, all on the GPU (cuBLASLt), against the CPU and PyTorch"
  python3 - "$root" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
root = sys.argv[1]
rng = np.random.default_rng(2)
d = 2048
init = [numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), f"w{i}")
        for i in range(3)] + [numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "b0")]
nodes = [helper.make_node("Gemm", ["x", "w0", "b0"], ["g0"], transB=1),
         helper.make_node("Relu", ["g0"], ["r0"]),
         helper.make_node("Gemm", ["r0", "w1"], ["g1"]),
         helper.make_node("Relu", ["g1"], ["r1"]),
         helper.make_node("MatMul", ["r1", "w2"], ["y"])]
g = helper.make_graph(nodes, "gpu_mlp",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, d])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, d])], init)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
          os.path.join(root, "gpu_mlp.onnx"))
x = numpy_helper.from_array(rng.standard_normal((512, d)).astype(np.float32), "x")
open(os.path.join(root, "mlp_x.pb"), "wb").write(x.SerializeToString())
PY
  for dev in gpu cpu; do
    k "$root/bin/kiln" run "$root/gpu_mlp.onnx" --device "$dev" --input "x=$root/mlp_x.pb" \
      --output-dir "$root/mlp_$dev" 2>&1 | tail -n 2 || status=$?
    k "$root/bin/kiln" bench "$root/gpu_mlp.onnx" --device "$dev" --input "x=$root/mlp_x.pb" \
      --iterations 50 --warmup 5 --json > "$OUT/mlp_bench_$dev.json" || status=$?
  done
  python3 - "$root" <<'PY' | tee "$OUT/mlp.txt"
import json, os, sys
import numpy as np
import onnx
import torch
from onnx import numpy_helper, load_tensor
root = sys.argv[1]
a = numpy_helper.to_array(load_tensor(f"{root}/mlp_gpu/y.pb"))
b = numpy_helper.to_array(load_tensor(f"{root}/mlp_cpu/y.pb"))
print(f"mlp gpu vs cpu: rel L2 {float(np.linalg.norm(a - b) / np.linalg.norm(b)):.3g}")
for d in ("gpu", "cpu"):
    p50 = json.load(open(os.path.join(os.environ["OUT"], f"mlp_bench_{d}.json")))["latency_ms"]["p50"]
    print(f"kiln bench --device {d}: p50 {p50:.3f} ms (feeds and results through host memory)")
m = onnx.load(f"{root}/gpu_mlp.onnx")
w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).cuda() for t in m.graph.initializer}
x = torch.from_numpy(numpy_helper.to_array(load_tensor(f"{root}/mlp_x.pb")).copy())
torch.backends.cuda.matmul.allow_tf32 = False
def f(xh):
    h = xh.cuda()
    h = torch.relu(h @ w["w0"].T + w["b0"])
    h = torch.relu(h @ w["w1"])
    return (h @ w["w2"]).cpu()
y = f(x).numpy()
print(f"torch vs kiln gpu: rel L2 {float(np.linalg.norm(y - a) / np.linalg.norm(y)):.3g}")
import time
for _ in range(5): f(x)
ts = []
for _ in range(50):
    t = time.perf_counter(); f(x); ts.append((time.perf_counter() - t) * 1e3)
print(f"torch eager fp32 (no TF32), same host->device->host path: p50 {float(np.median(ts)):.3f} ms")
PY
  fi
  cat > "$root/kiln_wrapped" <<EOF2
#!/bin/sh
LD_LIBRARY_PATH="$libs" exec "$root/bin/kiln" "\$@"
EOF2
  chmod +x "$root/kiln_wrapped"
  if [ "${KILN_GPU_NODE_TESTS:-0}" != 0 ]; then
    # The ONNX node tests of the device's own onnx package, on the CPU's reference path and
    # through the GPU (with CPU fallback): the GPU must pass no fewer.
    local node_data=$root/onnx-node-tests/node
    if [ -f "$carry/onnx_node_tests.tar.xz" ]; then
      mkdir -p "$root/onnx-node-tests" && tar -C "$root/onnx-node-tests" -xJf "$carry/onnx_node_tests.tar.xz"
    else
      node_data=$(python3 -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')/backend/test/data/node
    fi
    echo "== ONNX node tests: reference interpreter, then --device gpu --optimize"
    # KILN_GPU_NODE_REFERENCE=0 skips the reference pass (its count is the CPU's, known from CI)
    # when the call's time is short.
    local modes=("" "--device gpu --optimize")
    [ "${KILN_GPU_NODE_REFERENCE:-1}" = 0 ] && modes=("--device gpu --optimize")
    for mode in "${modes[@]}"; do
      # shellcheck disable=SC2086
      # 16 children at once (each GPU child opens the device: ~0.3 s each, one after another
      # they ran past the call's limit).
      local label=reference
      [ -n "$mode" ] && label=gpu
      k "$root/bin/kiln_conformance" --data "$node_data" --jobs 16 -v $mode \
        > "$OUT/node_tests_$label.txt" 2>&1
      tail -n 1 "$OUT/node_tests_$label.txt"
    done | tee "$OUT/node_tests.txt" || true
  fi
  if [ "${KILN_GPU_FULL_MODELS:-0}" != 0 ]; then
    # The full-size real models (bench/models_full.py, from this working tree's copy): exported
    # by the device's torch, onnxruntime's outputs as reference, each engine compiled for the GPU
    # and checked running there within 1e-4 relative L2 (KILN_GPU_FULL_ONLY: a subset).
    echo "== full-size models through the GPU (bench/models_full.py --device gpu)"
    local fake="$root/build"
    mkdir -p "$fake/src" "$fake/tests"
    for b in kiln:src/kiln kiln_model_check:tests/kiln_model_check; do
      printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libs" "$root/bin/${b%%:*}" \
        > "$fake/${b#*:}"
      chmod +x "$fake/${b#*:}"
    done
    # The engines alone (--engine-only): the direct path is the CPU's reference interpreter,
    # checked on the CPU machine, and takes minutes a model. fp32 within 1e-4, then (unless
    # KILN_GPU_FULL_FP16=0) --fp16 within 1e-2, the same exports and data.
    # KILN_GPU_FULL_PRECISIONS="fp16": one of them only.
    local precisions="fp32"
    [ "${KILN_GPU_FULL_FP16:-1}" != 0 ] && precisions="fp32 fp16"
    precisions=${KILN_GPU_FULL_PRECISIONS:-$precisions}
    for precision in $precisions; do
      echo "-- $precision"
      KILN_EXPORT_PYTHON=$(command -v python3) python3 "$tree/bench/models_full.py" \
        --build-dir "$fake" --out "$root/models-full" --device gpu --repeat 3 --engine-only \
        $([ "$precision" = fp16 ] && echo --fp16) --only "${KILN_GPU_FULL_ONLY:-}" 2>&1 |
        tee "$OUT/models_full_$precision.txt" || status=$?
      cp -r "$root/models-full/results" "$OUT/models_full_results_$precision" 2>/dev/null || true
      rm -rf "$root/models-full/results"
    done
    # KILN_GPU_PROFILE_FULL="light_densenet121 ...": `kiln profile --device gpu` of those cases
    # (fp32, the slowest nodes, each convolution's choice from KILN_GPU_TRACE) and `kiln bench`.
    for case in ${KILN_GPU_PROFILE_FULL:-}; do
      local model="$root/models-full/cases/$case/model.onnx"
      [ -f "$model" ] || { echo "no case $case"; continue; }
      echo "== profile of $case on the GPU (fp32)"
      k env KILN_GPU_TRACE=1 "$root/bin/kiln" profile "$model" --device gpu --iterations 20 \
        --warmup 3 --top 20 > "$OUT/profile_$case.txt" 2>&1 || status=$?
      grep -v "^kiln gpu:" "$OUT/profile_$case.txt" | tail -n 32
      k "$root/bin/kiln" bench "$model" --device gpu 2>&1 | grep -E "latency|device" ||
        status=$?
    done
  fi
  if [ "${KILN_GPU_MODELS:-1}" != 0 ]; then
    echo "== ResNet-50: Kiln on the GPU against onnxruntime (accuracy) and torch's best (speed)"
    python3 "$carry/resnet50_vs_torch.py" "$root/kiln_wrapped" "$root/models" \
      "$OUT/resnet50_vs_torch.json" --batches "${KILN_GPU_BATCHES:-1,64}" \
      --models "${KILN_GPU_CNNS:-resnet50}" 2>&1 |
      tee "$OUT/resnet50_vs_torch.txt" || status=$?
  fi
  if [ "${KILN_GPU_OWN_MODELS:-0}" != 0 ]; then
    # Kiln's own kernels alone (KILN_GPU_OWN_KERNELS=only: the AMD-portable path) against the
    # libraries on ResNet-50, whole and per convolution (bench/gpu/own_vs_lib.py).
    # KILN_GPU_OWN_VARIANTS="NAME:VAR=VALUE,VAR=VALUE ...": one run each, in turn, with those
    # variables (e.g. "split0:KILN_GPU_SPLIT_SLOTS=0 tma:KILN_GPU_GEMM_TILE=t128x128x64").
    local variant
    for variant in ${KILN_GPU_OWN_VARIANTS:-default:}; do
      local vname=${variant%%:*} vars=${variant#*:}
      echo "== own kernels vs cuDNN / cuBLASLt on ResNet-50 (fp16), $vname: ${vars:-as set}"
      env ${vars//,/ } python3 "$carry/own_vs_lib.py" "$root/kiln_wrapped" "$root/models" \
        "$OUT/own_vs_lib_$vname.json" --batches "${KILN_GPU_OWN_BATCHES:-1,64}" 2>&1 |
        tee "$OUT/own_vs_lib_$vname.txt" || status=$?
    done
  fi
  if [ "${KILN_GPU_TACTICS:-0}" != 0 ] && [ -f "$root/models/resnet50_b1.onnx" ]; then
    # Tactics chosen at compile time (issue 11): `kiln compile --device gpu` times each
    # convolution's algorithms once and stores them; opening the engine then runs at once. The
    # baseline is an engine planned for the CPU, opened on the GPU: it times at its first run.
    echo "== tactics: compile time, and open + first run with and without stored tactics"
    local m="$root/models/resnet50_b1.onnx"
    for dev in gpu cpu; do
      local t0 t1
      t0=$(date +%s.%N)
      k "$root/bin/kiln" compile "$m" -o "$root/tactics_$dev.kiln" --device "$dev" --fp16 \
        --no-verify 2>&1 | grep -E "tactics|wrote" || status=$?
      t1=$(date +%s.%N)
      echo "compile --device $dev: $(awk "BEGIN {print $t1 - $t0}") s"
    done
    k "$root/bin/kiln" inspect "$root/tactics_gpu.kiln" | grep -E "device target" || true
    for round in 1 2 3; do
      for dev in gpu cpu; do
        local t0 t1
        t0=$(date +%s.%N)
        k "$root/bin/kiln" run "$root/tactics_$dev.kiln" --device gpu > /dev/null 2>&1 || status=$?
        t1=$(date +%s.%N)
        echo "round $round: kiln run (open + one run) of the engine planned for $dev: $(awk "BEGIN {print $t1 - $t0}") s"
      done
    done
  fi 2>&1 | tee "$OUT/tactics.txt"
  if [ "${KILN_GPU_SERVER:-0}" != 0 ]; then
    # kiln-serve with a KIND_GPU instance, and Triton's GPU gauges through NVML.
    echo "== kiln-serve: a KIND_GPU instance, the GPU metrics"
    python3 - "$root" <<'PY'
import os, sys
import onnx
from onnx import TensorProto, helper
root = sys.argv[1]
d = os.path.join(root, "repo", "relu", "1")
os.makedirs(d, exist_ok=True)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
          os.path.join(d, "model.onnx"))
open(os.path.join(root, "repo", "relu", "config.pbtxt"), "w").write(
    'name: "relu"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
    'instance_group [{ kind: KIND_GPU, count: 1 }]\n')
PY
    k "$root/bin/kiln-serve" --model-repository "$root/repo" --http-port 18000 --grpc-port 18001 \
      --metrics-port 18002 > "$OUT/serve.log" 2>&1 &
    local serve_pid=$!
    python3 - <<'PY' 2>&1 | tee "$OUT/server_gpu.txt" || status=$?
import json, time, urllib.request
base = "http://127.0.0.1:18000"
for _ in range(100):
    try:
        if urllib.request.urlopen(base + "/v2/health/ready", timeout=1).status == 200:
            break
    except Exception:
        time.sleep(0.2)
body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                               "data": [1.0, -2.0, 3.0, -4.0]}]}).encode()
req = urllib.request.Request(base + "/v2/models/relu/infer", body,
                             {"Content-Type": "application/json"})
out = json.load(urllib.request.urlopen(req, timeout=30))
print("infer on the KIND_GPU instance:", out["outputs"][0]["data"])
text = urllib.request.urlopen("http://127.0.0.1:18002/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(("nv_gpu", "nv_energy")):
        print(line)
assert "nv_gpu_memory_total_bytes" in text, "no GPU metrics"
PY
    kill "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
    grep -E "GPU metrics|relu" "$OUT/serve.log" | head -n 5 || true
  fi
  if [ "${KILN_GPU_CUDASHM:-0}" != 0 ]; then
    # Triton's CUDA shared memory: buffers that CuPy allocates on the GPU (cudaMalloc, exported
    # with cudaIpcGetMemHandle) registered with kiln-serve over HTTP JSON, an inference whose
    # inputs and outputs live in them (a KIND_CPU and a KIND_GPU instance), the outputs read back
    # from the GPU and compared with numpy; status, a registration past the allocation, and
    # unregistering. PASS / FAIL lines, in $OUT/cudashm.txt.
    echo "== kiln-serve: CUDA shared memory (KILN_GPU_CUDASHM)"
    python3 - "$root" <<'PY'
import os, sys
import onnx
from onnx import TensorProto, helper
root = sys.argv[1]
for name, kind in (("add_sub_cpu", "KIND_CPU"), ("add_sub_gpu", "KIND_GPU")):
    d = os.path.join(root, "cudashm_repo", name, "1")
    os.makedirs(d, exist_ok=True)
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                           helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], name,
                          [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(d, "model.onnx"))
    open(os.path.join(root, "cudashm_repo", name, "config.pbtxt"), "w").write(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'instance_group [{{ kind: {kind}, count: 1 }}]\n')
PY
    # Not through k (a backgrounded function is a subshell): $! is then timeout's own pid, which
    # passes a TERM on to kiln-serve.
    LD_LIBRARY_PATH="$libs" timeout "${KILN_GPU_STEP_TIMEOUT:-600}" "$root/bin/kiln-serve" \
      --model-repository "$root/cudashm_repo" --http-port 18010 --grpc-port 18011 \
      --metrics-port 18012 > "$OUT/serve_cudashm.log" 2>&1 &
    local shm_pid=$!
    timeout 300 python3 - <<'PY' 2>&1 | tee "$OUT/cudashm.txt" || status=$?
import base64, json, sys, time, urllib.error, urllib.request
import numpy as np
import cupy
from cupy.cuda import runtime as rt

base = "http://127.0.0.1:18010"
failed = []

def check(ok, what, detail=""):
    print(("PASS " if ok else "FAIL ") + what + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failed.append(what)

def call(method, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data, {"Content-Type": "application/json"},
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")

ready = False
for _ in range(300):
    try:
        if urllib.request.urlopen(base + "/v2/health/ready", timeout=1).status == 200:
            ready = True
            break
    except Exception:
        time.sleep(0.2)
check(ready, "kiln-serve ready")
if not ready:
    sys.exit(1)
print("GPU:", rt.getDeviceProperties(0)["name"].decode(), "| CuPy", cupy.__version__)

def gpu_buffer(nbytes):
    # cudaMalloc itself (not CuPy's pool): an IPC handle names a whole allocation.
    ptr = rt.malloc(nbytes)
    rt.memset(ptr, 0, nbytes)
    return ptr

def upload(ptr, array):
    rt.memcpy(ptr, array.ctypes.data, array.nbytes, rt.memcpyHostToDevice)

def download(ptr, offset, shape):
    out = np.empty(shape, np.float32)
    rt.memcpy(out.ctypes.data, ptr + offset, out.nbytes, rt.memcpyDeviceToHost)
    return out

def register(name, ptr, byte_size, device_id=0):
    handle = rt.ipcGetMemHandle(ptr)
    return call("POST", f"/v2/cudasharedmemory/region/{name}/register",
                {"raw_handle": {"b64": base64.b64encode(bytes(handle)).decode()},
                 "device_id": device_id, "byte_size": byte_size})

a = np.array([[1, 2, 3, 4]], np.float32)
b = np.array([[10, 20, 30, 40]], np.float32)
in_ptr, out_ptr = gpu_buffer(32), gpu_buffer(64)
upload(in_ptr, np.concatenate([a, b], axis=0))
rt.deviceSynchronize()

s, body = register("in", in_ptr, 32)
check(s == 200, "register the input region (32 bytes)", f"{s} {body}")
s, body = register("out", out_ptr, 64)
check(s == 200, "register the output region (64 bytes)", f"{s} {body}")
s, body = call("GET", "/v2/cudasharedmemory/status")
got = sorted((r["name"], r["device_id"], r["byte_size"]) for r in body) if s == 200 else body
check(got == [("in", 0, 32), ("out", 0, 64)], "status lists both regions", got)
s, body = call("GET", "/v2/cudasharedmemory/region/in/status")
check(s == 200 and body == [{"name": "in", "device_id": 0, "byte_size": 32}],
      "status of one region", body)
s, body = call("GET", "/v2/systemsharedmemory/status")
check(s == 200 and body == [], "system status lists no CUDA region", body)
small = gpu_buffer(16)
s, body = register("toolarge", small, 1 << 30)
check(s == 400 and "past the end" in str(body),
      "a byte size past the allocation is refused", f"{s} {body}")
rt.free(small)

for model in ("add_sub_cpu", "add_sub_gpu"):
    rt.memset(out_ptr, 0xff, 64)
    rt.deviceSynchronize()
    req = {"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16}},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16,
                        "shared_memory_offset": 16}}],
        "outputs": [
        {"name": "OUTPUT0", "parameters": {"shared_memory_region": "out",
                                           "shared_memory_byte_size": 16}},
        {"name": "OUTPUT1", "parameters": {"shared_memory_region": "out",
                                           "shared_memory_byte_size": 16,
                                           "shared_memory_offset": 32}}]}
    s, body = call("POST", f"/v2/models/{model}/infer", req)
    check(s == 200, f"{model}: infer with inputs and outputs in CUDA regions", f"{s} {body}")
    if s == 200:
        check(all("data" not in o for o in body["outputs"]),
              f"{model}: the answer carries no output data", body["outputs"])
    o0, o1 = download(out_ptr, 0, (1, 4)), download(out_ptr, 32, (1, 4))
    gap = download(out_ptr, 16, (1, 4))
    check(np.array_equal(o0, a + b), f"{model}: OUTPUT0 read back from the GPU = a + b",
          o0.tolist())
    check(np.array_equal(o1, a - b), f"{model}: OUTPUT1 read back from the GPU = a - b",
          o1.tolist())
    check(np.isnan(gap).all(), f"{model}: the bytes between the outputs are untouched",
          gap.tolist())

# After the inferences: whether the runtime counts a handle opened twice decides whether
# unregistering one name unmaps the other's memory (informational).
s, body = register("dup", in_ptr, 32)
print(f"INFO the same handle registered a second time: {s} {body}")
call("POST", "/v2/cudasharedmemory/region/dup/unregister")

s, body = call("POST", "/v2/models/add_sub_cpu/infer", {"inputs": [
    {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
     "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16,
                    "shared_memory_offset": 24}},
    {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]})
check(s == 400 and "Invalid offset + byte size" in str(body),
      "a range past the region is refused before any copy", f"{s} {body}")

s, _ = call("POST", "/v2/cudasharedmemory/region/in/unregister")
s2, body = call("GET", "/v2/cudasharedmemory/status")
check(s == 200 and s2 == 200 and [r["name"] for r in body] == ["out"],
      "unregister one region", body)
s, _ = call("POST", "/v2/cudasharedmemory/unregister")
s2, body = call("GET", "/v2/cudasharedmemory/status")
check(s == 200 and body == [], "unregister all", body)
s, body = call("POST", "/v2/models/add_sub_cpu/infer", {"inputs": [
    {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
     "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16}},
    {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]})
check(s == 404, "an unregistered region is not found", f"{s} {body}")
s, _ = call("GET", "/v2/health/ready")
check(s == 200, "kiln-serve still ready")
rt.free(in_ptr)
rt.free(out_ptr)
print("CUDASHM", "FAIL " + ", ".join(failed) if failed else "PASS")
sys.exit(1 if failed else 0)
PY
    kill "$shm_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$shm_pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$shm_pid" 2>/dev/null; then
      # Still draining after 10 s: kiln-serve (timeout's child) first, then timeout.
      pkill -KILL -P "$shm_pid" 2>/dev/null || true
      kill -KILL "$shm_pid" 2>/dev/null || true
    fi
    wait "$shm_pid" 2>/dev/null || true
    grep -iE "error|cuda|shared memory" "$OUT/serve_cudashm.log" | head -n 10 || true
  fi
  if [ "${KILN_GPU_NCU_BERT:-0}" != 0 ]; then
    # Kernel times without the profile's per-node events: Nsight Compute over one fp16 BERT-base
    # run at batch KILN_GPU_NCU_BERT (clocks left alone), the small kernels only.
    echo "== ncu: BERT-base b${KILN_GPU_NCU_BERT} fp16, small kernels"
    local nb="${KILN_GPU_NCU_BERT}" mdir="$root/models"
    mkdir -p "$mdir"
    (cd "$carry" && python3 -c "
import sys, numpy as np
from onnx import numpy_helper
import bert_vs_torch as b
b.export($nb, '$mdir/bert_b$nb.onnx')
for n in ('input_ids', 'attention_mask'):
    v = np.random.default_rng(0).integers(0, 30522 if n == 'input_ids' else 2, (${nb}, 128))
    v = np.ones_like(v) if n == 'attention_mask' else v
    open(f'$mdir/{n}_ncu.pb', 'wb').write(numpy_helper.from_array(v.astype(np.int64), n).SerializeToString())
") 2>&1 | tail -n 3
    "$root/kiln_wrapped" compile "$mdir/bert_b$nb.onnx" -o "$mdir/bert_ncu.kiln" --no-verify \
      --device gpu --fp16 2>&1 | tail -n 2
    # KILN_GPU_NCU_SMALL=0: the attention kernel alone (below), without the small kernels' pass.
    if [ "${KILN_GPU_NCU_SMALL:-1}" != 0 ]; then
      # KILN_GPU_NCU_ALL=1: every kernel of the run, the libraries' GEMMs too (where the whole
      # run's time goes); else the own small kernels alone.
      local ncu_kernels='regex:^(?!.*(gemm|Kernel|cutlass|sm90|xmma)).*' ncu_launches=120
      if [ "${KILN_GPU_NCU_ALL:-0}" != 0 ]; then ncu_kernels='regex:.*'; ncu_launches=400; fi
      k ncu --clock-control none --csv --metrics \
        gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active \
        -k "$ncu_kernels" --launch-count "$ncu_launches" \
        "$root/bin/kiln" run "$mdir/bert_ncu.kiln" --device gpu \
        --input "input_ids=$mdir/input_ids_ncu.pb" --input "attention_mask=$mdir/attention_mask_ncu.pb" \
        > "$OUT/ncu_bert.csv" 2> "$OUT/ncu_bert.err" || status=$?
      tail -n 5 "$OUT/ncu_bert.err"
      wc -l "$OUT/ncu_bert.csv"
    fi
    if [ "${KILN_GPU_NCU_ATTENTION:-0}" != 0 ]; then
      # The attention kernel alone in detail: where its time goes (throughputs, occupancy,
      # warp stalls, memory traffic), two launches.
      k ncu --clock-control none --csv --page details --section SpeedOfLight --section Occupancy --section InstructionStats \
        --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section InstructionStats \
        -k 'regex:attention' --launch-count 2 \
        "$root/bin/kiln" run "$mdir/bert_ncu.kiln" --device gpu \
        --input "input_ids=$mdir/input_ids_ncu.pb" --input "attention_mask=$mdir/attention_mask_ncu.pb" \
        > "$OUT/ncu_attention.csv" 2> "$OUT/ncu_attention.err" || status=$?
      tail -n 3 "$OUT/ncu_attention.err"
      grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Block Limit [A-Za-z ]+|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Ipc Active)"' \
        "$OUT/ncu_attention.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | head -40
    fi
  fi
  if [ "${KILN_GPU_BERT:-1}" != 0 ]; then
    echo "== BERT-base: Kiln on the GPU against onnxruntime (accuracy) and torch's best (speed)"
    (cd "$carry" && python3 bert_vs_torch.py "$root/kiln_wrapped" "$root/models" \
      "$OUT/bert_vs_torch.json" --batches "${KILN_GPU_BERT_BATCHES:-1,32}" \
      --variants "${KILN_GPU_BERT_VARIANTS:-}") 2>&1 |
      tee "$OUT/bert_vs_torch.txt" || status=$?
  fi
  echo "== GPU tests exit status: $status"
  return "$status"
}

case "$mode" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 pack [BUILD_DIR] [CARRY_DIR] | run [CARRY_DIR]" >&2; exit 2 ;;
esac
