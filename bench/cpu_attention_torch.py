"""torch.onnx's export of scaled_dot_product_attention on the CPU: Kiln fused, Kiln unfused, ORT.

The pattern torch writes (sqrt(scale) on Q and on K^T, the mask added, Where(IsNaN(P), 0, P)
after the Softmax), at one BERT-base layer's shape, built with onnx.helper. Kiln is timed with
`kiln bench` (median latency), once as it compiles by default (fuse_attention takes the pattern)
and once with KILN_DISABLE_PASSES=fuse_attention; onnxruntime in this process, medians of rounds.

    python3 bench/cpu_attention_torch.py build/src/kiln [--batch 1] [--seq 128] [--rounds 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(path, b, h, s, d):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, h, s, d]) for n in "qkv"]
    ins.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, 1, s]))
    consts = [numpy_helper.from_array(np.array(d ** -0.25, np.float32), "c"),
              numpy_helper.from_array(np.array(0, np.float32), "zero")]
    n = helper.make_node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             n("Mul", ["q", "c"], ["qs"]), n("Mul", ["kt", "c"], ["ks"]),
             n("MatMul", ["qs", "ks"], ["scores"]), n("Add", ["scores", "mask"], ["masked"]),
             n("Softmax", ["masked"], ["p"], axis=-1), n("IsNaN", ["p"], ["nan"]),
             n("Where", ["nan", "zero", "p"], ["safe"]), n("MatMul", ["safe", "v"], ["y"])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, h, s, d])]
    model = helper.make_model(helper.make_graph(nodes, "sdpa", ins, out, consts),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def kiln_median(kiln, path, disabled):
    env = dict(os.environ, KILN_DISABLE_PASSES=disabled)
    r = subprocess.run([kiln, "bench", path, "--duration", "5"], env=env, check=True,
                       capture_output=True, text=True)
    return float(re.search(r"latency ms:.*?median ([0-9.]+)", r.stdout).group(1))


def ort_median(path, b, h, s, d, rounds):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((b, h, s, d)).astype(np.float32) for n in "qkv"}
    feeds["mask"] = np.zeros((b, 1, 1, s), np.float32)
    for _ in range(50):
        sess.run(None, feeds)
    times = []
    for _ in range(rounds * 3):
        t = time.perf_counter()
        for _ in range(200):
            sess.run(None, feeds)
        times.append((time.perf_counter() - t) / 200 * 1e3)
    return statistics.median(times), ort.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kiln")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    b, h, s, d = a.batch, 12, a.seq, 64
    path = os.path.join(tempfile.mkdtemp(), "sdpa_torch.onnx")
    build(path, b, h, s, d)
    fused = statistics.median(kiln_median(a.kiln, path, "") for _ in range(a.rounds))
    unfused = statistics.median(kiln_median(a.kiln, path, "fuse_attention") for _ in range(a.rounds))
    ort_ms, ort_version = ort_median(path, b, h, s, d, a.rounds)
    print(f"# Q/K/V [{b}, {h}, {s}, {d}], float32, {os.cpu_count()} CPUs, onnxruntime {ort_version}")
    print("| runtime | median ms | / onnxruntime |\n|---|---:|---:|")
    for name, ms in (("kiln (fuse_attention: one ScaledDotProductAttention)", fused),
                     ("kiln, KILN_DISABLE_PASSES=fuse_attention", unfused),
                     ("onnxruntime", ort_ms)):
        print(f"| {name} | {ms:.3f} | {ms / ort_ms:.2f} |")


if __name__ == "__main__":
    main()
