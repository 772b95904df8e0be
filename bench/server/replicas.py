#!/usr/bin/env python3
"""Replicas behind a real load balancer (issue 14, item 8): nginx (deploy/nginx/kiln.conf) in
front of three `kiln-serve` replicas on loopback, `--concurrency` clients busy for `--seconds`,
while one replica is taken away:

  drain  replica 1 gets SIGTERM (a rolling update): it drains and exits, and is started again
         on the same ports. No request may fail.
  kill   replica 2 gets SIGKILL and is started again. Only requests that were in flight on it at
         the kill may fail or be retried by the proxy.

Prints the counts (requests, failures by kind, requests per replica, retries, p50/p99) and the
checks; exit status 1 when a check fails. tests/deploy/test_replicas.py runs the same with a
shorter duration.

    python3 bench/server/replicas.py --kiln-serve build/src/kiln-serve --seconds 60
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import models  # noqa: E402
import replica_report  # noqa: E402
from replica_cluster import Cluster  # noqa: E402
from replica_load import Load  # noqa: E402

SCENARIOS = {"drain": (1, signal.SIGTERM), "kill": (2, signal.SIGKILL)}


def make_repo(path, queue_delay_us):
    """add_sub (INT32 [N, 4]: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) with a
    dynamic batcher that holds a request up to `queue_delay_us` for others: so that at the
    signal a replica holds queued requests, which a drain must finish, and new ones arrive while
    it does, which it must refuse (503) for the proxy to send elsewhere."""
    models.add_sub(path, "add_sub", "INT32", config=f"""
name: "add_sub"
backend: "onnxruntime"
max_batch_size: 32
input [
  {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
""")


def take_away(replica, sig):
    """Signals the replica, waits for it to exit, starts it again and waits until it is ready.
    Returns the times of each step (time.monotonic()) and the exit status."""
    t_signal = time.monotonic()
    replica.proc.send_signal(sig)
    code = replica.proc.wait(120)
    t_exit = time.monotonic()
    replica.start()
    replica.wait_ready()
    return {"signal": t_signal, "exited": t_exit, "ready": time.monotonic(), "exit_code": code}


def run_scenario(name, kiln_serve, workdir, seconds, concurrency, processes=4, at=0.3,
                 retry_post=True, queue_delay_us=5000):
    """One scenario on a fresh cluster: load for `seconds`, the replica taken away `at` of the
    way in. Returns the report (replica_report.summarize) with the checks' findings."""
    index, sig = SCENARIOS[name]
    repo = os.path.join(workdir, f"repo-{queue_delay_us}")
    if not os.path.isdir(repo):
        make_repo(repo, queue_delay_us)
    scenario_dir = os.path.join(workdir, name)
    os.makedirs(scenario_dir, exist_ok=True)
    # Few threads each: three replicas, nginx and the clients share the host's cores.
    args = ["--http-thread-count=2", "--grpc-thread-count=1", "--exit-timeout-secs=30"]
    with Cluster(kiln_serve, repo, scenario_dir, extra_args=args, retry_post=retry_post) as cluster:
        load = Load(cluster.nginx.http_port, concurrency, seconds, processes).start()
        time.sleep(max(0.0, load.started + seconds * at - time.monotonic()))
        event = take_away(cluster.replicas[index], sig)
        records = load.join()
        ports = {r.http_port: r.index for r in cluster.replicas}
        report = replica_report.summarize(name, records, ports, index, event, load.started,
                                          seconds, concurrency)
    report["load_generator_cpu_s"] = round(load.cpu_seconds, 1)
    report["problems"] = replica_report.check(report)
    report["logs"] = scenario_dir
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--processes", type=int, default=4, help="load generator processes")
    p.add_argument("--scenario", choices=[*SCENARIOS, "both"], default="both")
    p.add_argument("--queue-delay-us", type=int, default=5000,
                   help="the model's dynamic batching delay (what a drain has to finish)")
    p.add_argument("--no-retry-post", action="store_true",
                   help="drop non_idempotent from the example's proxy_next_upstream (an "
                   "experiment: the checks are expected to fail)")
    p.add_argument("--workdir", help="keep logs here (default: a temporary directory)")
    p.add_argument("--json", help="write the reports here")
    a = p.parse_args()
    names = list(SCENARIOS) if a.scenario == "both" else [a.scenario]
    workdir = a.workdir or tempfile.mkdtemp(prefix="kiln-replicas-")
    reports = [run_scenario(n, a.kiln_serve, workdir, a.seconds, a.concurrency, a.processes,
                            retry_post=not a.no_retry_post, queue_delay_us=a.queue_delay_us)
               for n in names]
    for r in reports:
        print(replica_report.render(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 1 if any(r["problems"] for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
