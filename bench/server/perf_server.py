#!/usr/bin/env python3
"""Triton's perf_analyzer, unchanged, against `kiln serve` over HTTP and gRPC.

Builds a small model repository (tests/server/models.py add_sub: OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1, FP32 [N, 16]) and, for each protocol, concurrency and repeat, starts a
fresh kiln-serve on free ports (`--metrics-config summary_latencies=true`), runs perf_analyzer,
then scrapes the server's latency summaries. A fresh server per run keeps the summaries' 60 s
sliding window to that run alone. Prints a markdown table of the medians over the repeats:
  * throughput, client p50 / p99 latency (perf_analyzer);
  * server-side p50 / p99 of the overhead, kiln_inference_overhead_summary_us: per request, its
    request duration minus its compute infer duration (queue, hand-off, batching, input concat,
    output split, decode), as quantiles over the run;
  * server-side p50 of the request duration and of compute infer (nv_inference_*_summary_us);
  * avg server overhead = server request latency - queue - compute, perf_analyzer's own
    "overhead", averaged from the statistics endpoint.

    python3 bench/server/perf_server.py --kiln-serve build/src/kiln-serve
"""
import argparse
import csv
import os
import statistics
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import models  # noqa: E402

CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: %d kind: KIND_CPU } ]
%s
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_repo(path, instances, dynamic_batching):
    import onnx
    import onnx.helper as oh
    from onnx import TensorProto as T
    # add_sub at width 16 (models.add_sub is fixed at 4).
    g = oh.make_graph(
        [oh.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         oh.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "add_sub",
        [oh.make_tensor_value_info(n, T.FLOAT, ["N", 16]) for n in ("INPUT0", "INPUT1")],
        [oh.make_tensor_value_info(n, T.FLOAT, ["N", 16]) for n in ("OUTPUT0", "OUTPUT1")])
    models._save(g, os.path.join(path, "add_sub", "1", "model.onnx"))
    models._write(os.path.join(path, "add_sub", "config.pbtxt"),
                  CONFIG % (instances, "dynamic_batching { }" if dynamic_batching else ""))


def wait_live(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"kiln-serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://localhost:{port}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("kiln-serve did not become ready")


SERVER_LINE = re.compile(
    r"Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) usec \+ "
    r"compute input (\d+) usec \+ compute infer (\d+) usec \+ compute output (\d+) usec\)")


QUANTILES = "0.5:0.05,0.9:0.01,0.99:0.001"


def scrape_summaries(port):
    """{(family, quantile): value} of the add_sub model's latency summaries."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://localhost:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.type != "summary":
            continue
        for smp in fam.samples:
            if smp.labels.get("model") == "add_sub" and "quantile" in smp.labels:
                out[(fam.name, smp.labels["quantile"])] = smp.value
    return out


def run_pa(pa, protocol, port, concurrency, interval_ms, stability, workdir):
    out_csv = os.path.join(workdir, f"{protocol}_{concurrency}.csv")
    cmd = pa + ["-m", "add_sub", "-u", f"localhost:{port}", "-i", protocol,
                "--concurrency-range", f"{concurrency}:{concurrency}",
                "--measurement-interval", str(interval_ms), "--percentile", "50",
                "--stability-percentage", str(stability),
                "--max-trials", "10", "-f", out_csv]
    print("$", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    with open(out_csv) as f:
        row = next(csv.DictReader(f))
    server = SERVER_LINE.search(done.stdout)
    if not server:
        raise RuntimeError(f"no server-side statistics in perf_analyzer's output:\n{done.stdout}")
    latency, overhead, queue, c_in, c_infer, c_out = map(int, server.groups())
    compute = c_in + c_infer + c_out
    p50 = int(row["p50 latency"])
    return {
        "protocol": protocol.upper(), "concurrency": concurrency,
        "throughput": float(row["Inferences/Second"]), "p50": p50, "p99": int(row["p99 latency"]),
        "server_latency": latency, "queue": queue, "compute": compute, "overhead": overhead,
        "p50_minus_compute": p50 - compute,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--interval-ms", type=int, default=3000)
    ap.add_argument("--stability", type=int, default=50,
                    help="perf_analyzer --stability-percentage (raise it on a busy machine)")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--dynamic-batching", action="store_true")
    ap.add_argument("--threads", type=int, default=4, help="HTTP and gRPC server threads")
    ap.add_argument("--repeats", type=int, default=3, help="runs per point; medians reported")
    args = ap.parse_args()

    pa = shlex.split(subprocess.run([os.path.join(HERE, "setup_perf_analyzer.sh")], check=True,
                                    capture_output=True, text=True).stdout.strip())
    rows = []
    with tempfile.TemporaryDirectory() as work:
        repo = os.path.join(work, "repo")
        make_repo(repo, args.instances, args.dynamic_batching)
        for protocol in args.protocols.split(","):
            for c in map(int, args.concurrency.split(",")):
                runs = [run_point(args, pa, repo, work, protocol, c) for _ in range(args.repeats)]
                row = {k: (statistics.median(r[k] for r in runs)
                           if isinstance(runs[0][k], (int, float)) else runs[0][k])
                       for k in runs[0]}
                row["overhead_p50_runs"] = [r["overhead_p50"] for r in runs]
                rows.append(row)
    print(f"medians of {args.repeats} runs per row; server-side quantiles from "
          f"kiln_inference_overhead_summary_us and nv_inference_*_summary_us")
    print("| protocol | concurrency | infer/s | client p50 us | client p99 us "
          "| server overhead p50 us | server overhead p99 us | request p50 us "
          "| compute infer p50 us | avg server overhead us (perf_analyzer) "
          "| overhead p50 of each run |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        each = ", ".join(f"{v:.1f}" for v in r["overhead_p50_runs"])
        print(f"| {r['protocol']} | {r['concurrency']} | {r['throughput']:.0f} | {r['p50']:.0f} | "
              f"{r['p99']:.0f} | {r['overhead_p50']:.1f} | {r['overhead_p99']:.1f} | "
              f"{r['request_p50']:.1f} | {r['infer_p50']:.1f} | {r['overhead']:.0f} | {each} |")


def run_point(args, pa, repo, work, protocol, concurrency):
    """One perf_analyzer run against a fresh server, with the server's summaries after it."""
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    cmd = [args.kiln_serve, f"--model-repository={repo}", f"--http-port={ports['http']}",
           f"--grpc-port={ports['grpc']}", f"--metrics-port={ports['metrics']}",
           f"--http-thread-count={args.threads}", f"--grpc-thread-count={args.threads}",
           "--metrics-config=summary_latencies=true",
           f"--metrics-config=summary_quantiles={QUANTILES}"]
    print("$", " ".join(cmd), file=sys.stderr)
    with open(os.path.join(work, "server.log"), "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_live(ports["http"], proc)
            row = run_pa(pa, protocol, ports[protocol], concurrency, args.interval_ms,
                         args.stability, work)
            q = scrape_summaries(ports["metrics"])
        finally:
            proc.terminate()
            proc.wait(60)
    row["overhead_p50"] = q[("kiln_inference_overhead_summary_us", "0.5")]
    row["overhead_p99"] = q[("kiln_inference_overhead_summary_us", "0.99")]
    row["request_p50"] = q[("nv_inference_request_summary_us", "0.5")]
    row["infer_p50"] = q[("nv_inference_compute_infer_summary_us", "0.5")]
    return row


if __name__ == "__main__":
    main()
