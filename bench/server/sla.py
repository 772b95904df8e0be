#!/usr/bin/env python3
"""SLA bench (issue 14 item 9): a latency objective at 2x overload, with and without it.

One `kiln-serve` in explicit model control serves a model of known compute time (a chain of
MatMuls, one instance, one intra-op thread, dynamic batching with two priority levels). The
bench first measures it: compute time per batch size from the statistics, and capacity as the
throughput of a closed loop that keeps every batch full. Then, for each repeat, it loads the
model twice in turn (the load API's config override gives each run a fresh version):

- `objective`: `parameters { key: "latency_objective_p99_ms" ... }` set (default: 5x the
  compute time of a full batch, so a high-priority request fits behind the batch running);
- `none`: the same config without it (what Triton does: every request queues);

and offers an open loop (Poisson arrivals) at --overload x capacity for --seconds, --high-share
of the requests at priority 1 (high), the rest at priority 2 (low), over HTTP with one connection
per request in flight (so the server, not the client's pool, decides the order). Latency is from
the request's send to its last response byte; refusals (503) are counted, not timed. A run waits
for every request it sent, so the `none` runs also drain the backlog they built.

The host is shared and noisy: every figure printed is the median over --repeats runs, the runs of
the two configs interleaved so both see the same noise.

    python3 bench/server/sla.py --kiln-serve build/src/kiln-serve --seconds 20 --repeats 3 \\
        --json bench/results/2026-12-07-sla.json
"""
import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, HERE)
import models  # noqa: E402
from perf_server import free_port, wait_live  # noqa: E402

MODEL = "sla_bench"
WIDTH = 256


def base_config(args):
    return {
        "backend": "onnxruntime",
        "max_batch_size": args.max_batch,
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "dynamic_batching": {"max_queue_delay_microseconds": args.delay_us,
                             "priority_levels": 2, "default_priority_level": 2},
        "parameters": {"intra_op_thread_count": {"string_value": "1"}},
    }


def config_text(config):
    return (f'backend: "onnxruntime"\nmax_batch_size: {config["max_batch_size"]}\n'
            'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
            'parameters { key: "intra_op_thread_count" value { string_value: "1" } }\n')


def request_body(rows, priority):
    data = np.zeros((1, rows, WIDTH), np.float32).tobytes()
    header = {"inputs": [{"name": "INPUT0", "shape": [1, rows, WIDTH], "datatype": "FP32",
                          "parameters": {"binary_data_size": len(data)}}],
              "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
              "parameters": {"priority": priority}}
    head = json.dumps(header).encode()
    return head + data, {"Inference-Header-Content-Length": str(len(head)),
                         "Content-Type": "application/octet-stream"}


def http_json(port, method, path, body=None):
    req = urllib.request.Request(f"http://localhost:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
        return json.loads(data) if data else None


def load(port, config):
    http_json(port, "POST", f"/v2/repository/models/{MODEL}/load",
              {"parameters": {"config": json.dumps(config)}})


def model_stats(port):
    return http_json(port, "GET", f"/v2/models/{MODEL}/stats")["model_stats"][0]


async def send(session, url, body, headers, priority, records):
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
            status = r.status
    except Exception:  # noqa: BLE001 - counted as an error of the run
        status = -1
    records.append((priority, status, start, time.perf_counter()))


async def closed_loop(url, rows, concurrency, seconds):
    import aiohttp
    records = []
    bodies = {p: request_body(rows, p) for p in (1, 2)}
    stop = time.perf_counter() + seconds

    async def worker(session):
        while time.perf_counter() < stop:
            await send(session, url, *bodies[2], 2, records)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return records


async def open_loop(url, rows, rate, seconds, high_share, seed):
    import aiohttp
    rng = np.random.default_rng(seed)
    bodies = {p: request_body(rows, p) for p in (1, 2)}
    records, tasks = [], []
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        t0 = time.perf_counter()
        due = t0
        while due < t0 + seconds:
            now = time.perf_counter()
            if due > now:
                await asyncio.sleep(due - now)
            priority = 1 if rng.random() < high_share else 2
            tasks.append(asyncio.create_task(
                send(session, url, *bodies[priority], priority, records)))
            due += rng.exponential(1.0 / rate)
        offered = len(tasks) / (time.perf_counter() - t0)
        await asyncio.gather(*tasks)
    return records, offered


def summarize(records, seconds, objective_ms):
    out = {}
    for priority in (1, 2):
        mine = [r for r in records if r[0] == priority]
        ok = sorted((r[3] - r[2]) * 1e3 for r in mine if r[1] == 200)
        out[priority] = {
            "sent": len(mine),
            "ok": len(ok),
            "refused": sum(1 for r in mine if r[1] == 503),
            "errors": sum(1 for r in mine if r[1] not in (200, 503)),
            "within_objective": sum(1 for t in ok if t <= objective_ms),
            "p50_ms": float(np.percentile(ok, 50)) if ok else None,
            "p99_ms": float(np.percentile(ok, 99)) if ok else None,
        }
    # Goodput: answers that arrived within the objective, per second of offered load.
    out["goodput_rps"] = sum(out[p]["within_objective"] for p in (1, 2)) / seconds
    return out


def sla_metrics(metrics_port):
    """The controller's state at the end of a run (kiln_sla_* gauges, in ms)."""
    with urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics", timeout=60) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        for name in ("queue_delay", "admission_limit", "latency_p99"):
            if line.startswith(f"kiln_sla_{name}_us{{") and f'model="{MODEL}"' in line:
                out[name + "_ms"] = float(line.split()[-1]) / 1e3
    return out


def measure(port, url, args):
    """Compute time per batch size and capacity (requests/s at full batches)."""
    load(port, base_config(args))
    asyncio.run(closed_loop(url, args.rows, args.max_batch * 2, 2))  # warm up
    before = model_stats(port)
    records = asyncio.run(closed_loop(url, args.rows, args.max_batch * 3, args.capacity_seconds))
    after = model_stats(port)
    capacity = sum(1 for r in records if r[1] == 200) / args.capacity_seconds
    compute = {}
    for b in after["batch_stats"]:
        prev = next((p for p in before["batch_stats"] if p["batch_size"] == b["batch_size"]), None)
        n = b["compute_infer"]["count"] - (prev["compute_infer"]["count"] if prev else 0)
        ns = sum(b[k]["ns"] - (prev[k]["ns"] if prev else 0)
                 for k in ("compute_input", "compute_infer", "compute_output"))
        if n > 0:
            compute[b["batch_size"]] = ns / n / 1e6
    return capacity, compute


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    ap.add_argument("--rows", type=int, default=32, help="rows per request ([1, rows, 256])")
    ap.add_argument("--layers", type=int, default=384, help="MatMuls in the model's chain")
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--delay-us", type=int, default=2000, help="max_queue_delay_microseconds")
    ap.add_argument("--objective-ms", type=float, default=0,
                    help="the objective (0: 5x the measured compute time of a full batch)")
    ap.add_argument("--overload", type=float, default=2.0, help="offered load / capacity")
    ap.add_argument("--high-share", type=float, default=0.2, help="share of priority-1 requests")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--capacity-seconds", type=float, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write every run and the medians here")
    args = ap.parse_args()

    # One socket per request in flight: the `none` runs hold thousands.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with tempfile.TemporaryDirectory() as repo:
        models.slow(repo, MODEL, config_text(base_config(args)), layers=args.layers,
                    width=WIDTH, rows=None)
        port, metrics = free_port(), free_port()
        log = open(os.path.join(repo, "server.log"), "w")
        proc = subprocess.Popen(
            [args.kiln_serve, f"--model-repository={repo}", f"--http-port={port}",
             f"--metrics-port={metrics}", "--allow-grpc=false", "--model-control-mode=explicit",
             f"--load-model={MODEL}", "--http-thread-count=2"], stdout=log, stderr=log)
        try:
            wait_live(port, proc)
            url = f"http://localhost:{port}/v2/models/{MODEL}/infer"
            capacity, compute = measure(port, url, args)
            full = compute.get(args.max_batch) or max(compute.values())
            objective = args.objective_ms or max(1.0, round(5 * full, 1))
            rate = args.overload * capacity
            print(f"compute ms per batch size: "
                  + ", ".join(f"{b}: {t:.2f}" for b, t in sorted(compute.items())))
            print(f"capacity {capacity:.1f} req/s; offered {rate:.1f} req/s "
                  f"({args.overload}x) for {args.seconds:.0f} s; objective {objective} ms; "
                  f"{args.high_share:.0%} high priority", flush=True)
            runs = {"objective": [], "none": []}
            for rep in range(args.repeats):
                order = ["objective", "none"] if rep % 2 == 0 else ["none", "objective"]
                for name in order:
                    config = base_config(args)
                    if name == "objective":
                        config["parameters"]["latency_objective_p99_ms"] = {
                            "string_value": str(objective)}
                    load(port, config)
                    # A few requests at light load teach the new version its compute time.
                    asyncio.run(closed_loop(url, args.rows, 2, 1))
                    records, offered = asyncio.run(open_loop(
                        url, args.rows, rate, args.seconds, args.high_share, seed=rep))
                    s = summarize(records, args.seconds, objective)
                    s["offered_rps"] = offered
                    if name == "objective":
                        s["controller"] = sla_metrics(metrics)
                    runs[name].append(s)
                    print(f"  repeat {rep + 1} {name:9s}: " + "; ".join(
                        f"p{p} ok {s[p]['ok']} refused {s[p]['refused']} "
                        f"p50 {fmt(s[p]['p50_ms'])} p99 {fmt(s[p]['p99_ms'])} ms"
                        for p in (1, 2)) + f"; goodput {s['goodput_rps']:.1f}/s"
                        + (f"; controller {s['controller']}" if "controller" in s else ""),
                        flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()

    medians = {name: median_run(rs) for name, rs in runs.items()}
    print(f"\nmedians over {args.repeats} repeats (ms; counts per run):")
    print("| config | priority | sent | ok | refused | errors | within objective | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("objective", "none"):
        for p in (1, 2):
            m = medians[name][p]
            print(f"| {name} | {p} | {m['sent']:.0f} | {m['ok']:.0f} | {m['refused']:.0f} | "
                  f"{m['errors']:.0f} | {m['within_objective']:.0f} | {fmt(m['p50_ms'])} | "
                  f"{fmt(m['p99_ms'])} |")
    for name in ("objective", "none"):
        print(f"goodput {name} (answers within the objective): "
              f"{medians[name]['goodput_rps']:.1f} req/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "capacity_rps": capacity, "compute_ms": compute,
                       "objective_ms": objective, "offered_rps": rate, "runs": runs,
                       "medians": medians}, f, indent=1)


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def median_run(runs):
    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None
    out = {p: {k: med([r[p][k] for r in runs]) for k in runs[0][p]} for p in (1, 2)}
    out["offered_rps"] = med([r["offered_rps"] for r in runs])
    out["goodput_rps"] = med([r["goodput_rps"] for r in runs])
    return out


if __name__ == "__main__":
    main()
