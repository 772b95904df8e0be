#!/usr/bin/env python3
"""perf_analyzer against kiln-serve and the real Triton 2.51 in one run (issue 14 item 6 and its
acceptance table): HTTP and gRPC at concurrency 1 / 4 / 16, both servers up side by side on the
differential tests' add_sub model (tests/server/triton_models.py: FP32 [4], max_batch_size 8, one
instance; Kiln runs it as ONNX, Triton with its Python backend, the only backend its PyPI wheel
ships), each with its default flags. The points are interleaved (for every protocol and
concurrency, Kiln then Triton, the order swapped every round) so a shared machine's noise lands on
both; medians over the rounds, ratios Kiln / Triton.

Besides the client's p50 / p99 and throughput, perf_analyzer's server-side split is reported:
"overhead" (request time outside queue and compute: the server's own cost) and compute (the
backend's: ONNX kernels for Kiln, the Python stub's round trip for Triton), so what the server
itself costs can be told apart from what its model backend costs.

    python3 bench/server/perf_vs_triton.py --kiln-serve build/src/kiln-serve [--rounds 3]
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, HERE)
import triton_models  # noqa: E402
from conftest import free_port  # noqa: E402
from perf_server import run_pa  # noqa: E402
from triton import Triton  # noqa: E402


class Kiln:
    def __init__(self, binary, repo, log_path):
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [binary, f"--model-repository={repo}", f"--http-port={self.http_port}",
             f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(
                        f"http://localhost:{self.http_port}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        time.sleep(1)  # the gRPC listener starts after the HTTP one
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("kiln-serve did not become ready")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval-ms", type=int, default=3000)
    ap.add_argument("--stability", type=int, default=50)
    args = ap.parse_args()
    pa = shlex.split(subprocess.run([os.path.join(HERE, "setup_perf_analyzer.sh")], check=True,
                                    capture_output=True, text=True).stdout.strip())
    tmp = tempfile.mkdtemp(prefix="kiln-vs-triton-")
    kiln = Kiln(args.kiln_serve, triton_models.kiln_repo(os.path.join(tmp, "kiln_repo")),
                os.path.join(tmp, "kiln.log")).wait_ready()
    triton = Triton(tmp, triton_models.triton_repo(os.path.join(tmp, "triton_repo")), [])
    triton.wait_ready()
    results = {}  # (server, protocol, concurrency) -> [row]
    try:
        for r in range(args.rounds):
            for protocol in args.protocols.split(","):
                for c in (int(x) for x in args.concurrency.split(",")):
                    order = [("kiln", kiln), ("triton", triton)]
                    if r % 2:
                        order.reverse()
                    for name, server in order:
                        port = server.http_port if protocol == "http" else server.grpc_port
                        row = run_pa(pa, protocol, port, c, args.interval_ms, args.stability, tmp)
                        results.setdefault((name, protocol, c), []).append(row)
                        print(f"round {r} {name} {protocol} c{c}: p50 {row['p50']} us, "
                              f"{row['throughput']:.0f}/s, overhead {row['overhead']} us, "
                              f"compute {row['compute']} us", file=sys.stderr, flush=True)
    finally:
        kiln.stop()
        triton.stop()

    def med(name, protocol, c, key):
        return statistics.median(row[key] for row in results[(name, protocol, c)])

    print(f"\nmedians over {args.rounds} rounds; ratio = Kiln / Triton (lower is better for "
          "latency, higher for throughput)\n")
    print("| protocol | concurrency | Kiln p50 us | Triton p50 us | p50 ratio | Kiln p99 us | "
          "Triton p99 us | Kiln infer/s | Triton infer/s | throughput ratio | Kiln overhead us | "
          "Triton overhead us | Kiln compute us | Triton compute us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for protocol in args.protocols.split(","):
        for c in (int(x) for x in args.concurrency.split(",")):
            k = {key: med("kiln", protocol, c, key) for key in
                 ("p50", "p99", "throughput", "overhead", "compute")}
            t = {key: med("triton", protocol, c, key) for key in
                 ("p50", "p99", "throughput", "overhead", "compute")}
            print(f"| {protocol.upper()} | {c} | {k['p50']:.0f} | {t['p50']:.0f} | "
                  f"{k['p50'] / t['p50']:.2f} | {k['p99']:.0f} | {t['p99']:.0f} | "
                  f"{k['throughput']:.0f} | {t['throughput']:.0f} | "
                  f"{k['throughput'] / t['throughput']:.2f} | {k['overhead']:.0f} | "
                  f"{t['overhead']:.0f} | {k['compute']:.0f} | {t['compute']:.0f} |")


if __name__ == "__main__":
    main()
