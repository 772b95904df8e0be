"""Soak test of kiln-serve: concurrency N of mixed valid and malformed HTTP requests for a while;
reports failed valid requests, RSS growth and liveness (issue 4's acceptance: none failed, RSS
growth under 5 %, live throughout).

    python3 bench/server/soak.py --kiln-serve build/src/kiln-serve --seconds 600 --concurrency 16
"""
import argparse
import http.client
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "server"))
import models  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


VALID_JSON = json.dumps({"inputs": [
    {"name": f"INPUT{i}", "datatype": "FP32", "shape": [2, 4], "data": list(range(8))}
    for i in range(2)]})
HDR = json.dumps({"inputs": [
    {"name": f"INPUT{i}", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}
    for i in range(2)], "parameters": {"binary_data_output": True}}).encode()
VALID_BINARY = HDR + struct.pack("16f", *range(16))
BAD = [
    (b'{"inputs": [', {}),
    (json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 5],
                             "data": list(range(10))}]}), {}),
    (json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2 ** 40, 2 ** 40],
                             "data": [1]}]}), {}),
    (VALID_BINARY, {"Inference-Header-Content-Length": str(len(VALID_BINARY) + 3)}),
    (VALID_BINARY[:-3], {"Inference-Header-Content-Length": str(len(HDR))}),
    (json.dumps({"inputs": [], "outputs": [{"name": "x"}] * 5000}), {}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-serve", default="build/src/kiln-serve")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    repo = tempfile.mkdtemp()
    models.add_sub(repo, "m", "FP32", config='backend: "onnxruntime"\nmax_batch_size: 8\n'
                   'dynamic_batching { max_queue_delay_microseconds: 100 }')
    port, mport = free_port(), free_port()
    proc = subprocess.Popen([args.kiln_serve, f"--model-repository={repo}", f"--http-port={port}",
                             f"--metrics-port={mport}", "--allow-grpc=false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    counts = {"valid_ok": 0, "valid_failed": 0, "bad_4xx": 0, "bad_other": 0}
    lock = threading.Lock()
    stop = time.time() + args.seconds
    warm = time.time() + min(10, args.seconds / 4)
    rss = {}

    def worker(seed):
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("localhost", port, timeout=30)
        while time.time() < stop:
            kind = rng.random()
            try:
                if kind < 0.7:
                    binary = rng.random() < 0.5
                    body = VALID_BINARY if binary else VALID_JSON
                    headers = {"Inference-Header-Content-Length": str(len(HDR))} if binary else {}
                    conn.request("POST", "/v2/models/m/infer", body, headers)
                    r = conn.getresponse()
                    r.read()
                    key = "valid_ok" if r.status == 200 else "valid_failed"
                else:
                    body, headers = rng.choice(BAD)
                    conn.request("POST", "/v2/models/m/infer", body, headers)
                    r = conn.getresponse()
                    r.read()
                    key = "bad_4xx" if 400 <= r.status < 500 else "bad_other"
                    if r.getheader("Connection", "").lower() == "close":
                        conn.close()
                        conn = http.client.HTTPConnection("localhost", port, timeout=30)
            except (OSError, http.client.HTTPException):
                key = "valid_failed" if kind < 0.7 else "bad_other"
                conn.close()
                conn = http.client.HTTPConnection("localhost", port, timeout=30)
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    live_failures = 0
    while time.time() < stop:
        time.sleep(1)
        if "warm" not in rss and time.time() > warm:
            rss["warm"] = rss_kb(proc.pid)
        try:
            c = http.client.HTTPConnection("localhost", port, timeout=5)
            c.request("GET", "/v2/health/live")
            live_failures += c.getresponse().status != 200
        except OSError:
            live_failures += 1
    for t in threads:
        t.join()
    rss["end"] = rss_kb(proc.pid)
    proc.terminate()
    proc.wait(60)
    growth = (rss["end"] - rss["warm"]) / rss["warm"] * 100
    print(json.dumps({**counts, "live_failures": live_failures, "rss_warm_kb": rss["warm"],
                      "rss_end_kb": rss["end"], "rss_growth_pct": round(growth, 2),
                      "exit_code": proc.returncode}))
    ok = counts["valid_failed"] == 0 and counts["bad_other"] == 0 and live_failures == 0
    sys.exit(0 if ok and growth < 5 else 1)


if __name__ == "__main__":
    main()
