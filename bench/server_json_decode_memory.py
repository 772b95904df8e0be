#!/usr/bin/env python3
"""Peak memory of decoding a KServe v2 JSON infer request (issue 13, item 5): kiln-serve's peak
RSS growth (VmHWM) while it takes one request of N FP32 values written as "1," (2 bytes of text
each; --value sets another text), as a multiple of the body size. Each case runs on a fresh server
so its peak is its own.

    python3 bench/server_json_decode_memory.py --kiln-serve build/src/kiln-serve --mib 32
    python3 bench/server_json_decode_memory.py --kiln-serve build/src/kiln-serve --value 1.25

Cases (model "ident": FP32 [-1] -> Identity, no batching):
  accepted         decoded, run, answered with a binary output (the answer's tensors count too)
  wrong input name decoded in full (tensor allocated), then refused by the model's checks:
                   the decode's own peak
  count mismatch   shape one more than the data: refused by the decoder before any tensor
  binary, wrong input name   the same tensor sent with the binary extension, for comparison
The body itself (held by the server while it is decoded) is part of every figure: a decoder that
kept nothing beyond the body and the tensor would show about 1x (body) + 2x (4 bytes a value
for 2 bytes of text) = 3x for "wrong input name".
"""
import argparse
import http.client
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "server"))
from perf_server import free_port, wait_live  # noqa: E402


def make_repo(repo):
    import onnx
    import onnx.helper as oh
    from onnx import TensorProto as T
    g = oh.make_graph([oh.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "ident",
                      [oh.make_tensor_value_info("INPUT0", T.FLOAT, [-1])],
                      [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, [-1])])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.join(repo, "ident", "1"))
    onnx.save(model, os.path.join(repo, "ident", "1", "model.onnx"))
    with open(os.path.join(repo, "ident", "config.pbtxt"), "w") as f:
        f.write('backend: "onnxruntime"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')


def hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def json_body(name, shape, n, value):
    head = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": [shape]}],
                       "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                      separators=(",", ":"))
    # ..."shape":[n]} -> ..."shape":[n],"data":[1,1,...,1]}
    cut = head.index("]}],") + 1
    data = b"[" + (value + b",") * (n - 1) + value + b"]"
    return head[:cut].encode() + b',"data":' + data + head[cut:].encode(), {}


def binary_body(name, n):
    head = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": [n],
                                   "parameters": {"binary_data_size": 4 * n}}]},
                      separators=(",", ":")).encode()
    return head + struct.pack(f"<{n}f", *([1.0] * n)), {
        "Inference-Header-Content-Length": str(len(head))}


def cases(mib, value):
    n = (mib << 20) // (len(value) + 1)  # "1," per value
    yield "accepted", json_body("INPUT0", n, n, value)
    yield "wrong input name", json_body("NOPE", n, n, value)
    yield "count mismatch", json_body("INPUT0", n + 1, n, value)
    yield "binary, wrong input name", binary_body("NOPE", n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln-serve", default=os.path.join(os.path.dirname(HERE), "build", "src",
                                                         "kiln-serve"))
    ap.add_argument("--mib", type=int, default=32, help="MiB of JSON tensor text")
    ap.add_argument("--value", default="1", help="the text of each value (default 1: \"1,\")")
    args = ap.parse_args()
    print(f"| request ({args.mib} MiB of \"{args.value},\") | status | body | peak RSS growth | "
          "growth / body |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        repo = os.path.join(work, "repo")
        make_repo(repo)
        for name, (body, headers) in cases(args.mib, args.value.encode()):
            port = free_port()
            proc = subprocess.Popen([args.kiln_serve, f"--model-repository={repo}",
                                     f"--http-port={port}", "--allow-grpc=false",
                                     "--allow-metrics=false", "--http-max-body-bytes=1073741824"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                wait_live(port, proc)
                time.sleep(0.5)
                base = hwm(proc.pid)
                conn = http.client.HTTPConnection("localhost", port, timeout=300)
                conn.request("POST", "/v2/models/ident/infer", body=body, headers=headers)
                resp = conn.getresponse()
                out = resp.read()
                conn.close()
                grown = hwm(proc.pid) - base
                note = "" if resp.status == 200 else " " + out[:80].decode(errors="replace")
                print(f"| {name} | {resp.status}{note} | {len(body) / 2**20:.0f} MiB | "
                      f"{grown / 2**20:.0f} MiB | {grown / len(body):.1f}x |", flush=True)
            finally:
                proc.terminate()
                proc.wait(60)


if __name__ == "__main__":
    main()
