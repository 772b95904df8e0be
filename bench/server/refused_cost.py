#!/usr/bin/env python3
"""What a refused request costs the server: peak RSS growth of kiln-serve (VmHWM) per byte of
body, for bodies a hostile client would send (issue 13, item 5). Each case runs on a fresh
server so its peak is its own.

    python3 bench/server/refused_cost.py --kiln-serve build/src/kiln-serve
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import models  # noqa: E402
from perf_server import free_port, wait_live  # noqa: E402


def hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def cases(mib):
    n = mib << 20
    count = n // 4  # '"a",' per element
    yield "nested [[[[", b"[" * n
    yield "BYTES JSON, shape mismatch", json.dumps({"inputs": [{
        "name": "INPUT0", "datatype": "BYTES", "shape": [count + 1],
        "data": ["a"] * count}]}).encode()
    yield "FP32 JSON, shape mismatch", json.dumps({"inputs": [{
        "name": "INPUT0", "datatype": "FP32", "shape": [n // 2 + 1],
        "data": [1] * (n // 2)}]}).encode()
    yield "FP32 JSON, wrong input name", json.dumps({"inputs": [{
        "name": "NOPE", "datatype": "FP32", "shape": [n // 2], "data": [1] * (n // 2)}]}).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    ap.add_argument("--mib", type=int, default=32)
    args = ap.parse_args()
    print(f"| body ({args.mib} MiB) | status | peak RSS growth | growth / body size |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        repo = os.path.join(work, "repo")
        models.add_sub(repo, "bytes", "BYTES", batch=False)
        for name, body in cases(args.mib):
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
                conn.request("POST", "/v2/models/bytes/infer", body=body)
                status = conn.getresponse().status
                conn.close()
                grown = hwm(proc.pid) - base
                print(f"| {name} | {status} | {grown / 2**20:.0f} MiB | {grown / len(body):.1f}x |")
            finally:
                proc.terminate()
                proc.wait(60)


if __name__ == "__main__":
    main()
