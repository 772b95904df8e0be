#!/usr/bin/env python3
"""Soak: `kiln serve` under concurrent valid and malformed requests over HTTP and gRPC.

Each of --concurrency client threads loops for --seconds, alternating protocols; every
--bad-every-th request is malformed (wrong raw size, wrong shape, unknown model, bad datatype,
truncated BYTES prefix) and must fail with a client error, every other one must succeed with the
right answer. With --hostile N, N more threads loop over the attacks of issue 13 on raw sockets
(64 KiB trailer fields, credentials in trailers, unknown transfer codings, deeply nested JSON,
responses past the size limit, bodies declared and never sent, slow headers); each must get its
refusal (or its connection closed) and never a success. The server's RSS is sampled after a
warm-up and at the end, and liveness is checked every second. Exit status 1 on any failed valid request, wrong answer, unexpected success,
liveness failure, or RSS growth over --max-rss-growth percent.

    python3 bench/server/soak.py --kiln-serve build/src/kiln-serve --seconds 600 --concurrency 16
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, HERE)
import models  # noqa: E402
from perf_server import free_port, wait_live  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def malformed_grpc(i):
    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for n in range(2):
        req.inputs.add(name=f"INPUT{n}", datatype="FP32", shape=[1, 4])
    good = np.ones(4, np.float32).tobytes()
    kind = i % 4
    if kind == 0:
        req.raw_input_contents.extend([good[:-4], good])  # wrong raw size
    elif kind == 1:
        req.inputs[0].shape[:] = [1, 5]  # shape mismatch
        req.raw_input_contents.extend([good + good[:4], good])
    elif kind == 2:
        req.model_name = "nope"
        req.raw_input_contents.extend([good, good])
    else:
        req.inputs[1].datatype = "FLOAT"
        req.raw_input_contents.extend([good, good])
    return req


def malformed_http(i):
    if i % 2:
        return b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1]}]}', {}
    header = b'{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":6}}]}'
    return header + struct.pack("<I", 100) + b"ab", {"Inference-Header-Content-Length": str(len(header))}


AUTH = {"authorization": "Bearer t"}  # the soak's server runs with --http-bearer-token=t
AUTH_METADATA = tuple(AUTH.items())


def raw_http(port, data, timeout=30, keep_open=0.0):
    import socket
    with socket.create_connection(("localhost", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return None  # the server refused and closed before the request was all sent
        if keep_open:
            time.sleep(keep_open)
        else:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError, OSError):
                break
            if not chunk:
                break
            out += chunk
    return int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.") else None


def chunked(path, body, trailer=b"", headers=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + headers +
            b"\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n")


# (name, request bytes, statuses that count as refused; None: the server closed the connection)
HOSTILE = [
    ("trailer-64k", chunked(b"/v2/repository/index", b"{}", b"X-B: " + b"a" * (64 << 10) + b"\r\n"),
     {431}),
    ("header-70k", b"GET /v2 HTTP/1.1\r\nX-B: " + b"b" * 70000 + b"\r\n\r\n", {431, None}),
    ("trailer-credentials", chunked(b"/v2/repository/index", b"{}", b"Authorization: Bearer t\r\n"),
     {401}),
    ("transfer-gzip", b"POST /v2/repository/index HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
     {501}),
    ("nested-json", b"POST /v2/models/add_sub/infer HTTP/1.1\r\nAuthorization: Bearer t\r\n"
     b"Content-Length: %d\r\n\r\n"
     % (4 << 20) + b"[" * (4 << 20), {400}),
    ("response-too-large", b"POST /v2/models/expand/infer HTTP/1.1\r\nAuthorization: Bearer t\r\n"
     b"Content-Length: 77\r\n\r\n"
     b'{"inputs":[{"name":"COUNT","datatype":"INT64","shape":[1],"data":[8388608]}]}', {400}),
]


def hostile_worker(tid, args, ports, stop, stats, lock):
    local = {"refused": 0, "failures": []}
    i = tid
    while not stop.is_set():
        i += 1
        if i % 7 == 6:
            # A body declared and never sent, then a slow header: both must be cut off.
            status = raw_http(ports["http"], b"POST /v2/models/add_sub/infer HTTP/1.1\r\n"
                              b"Content-Length: 60000000\r\n\r\n{", timeout=60, keep_open=0.1)
            name, ok = "declared-body", status in (None, 400, 503)
        else:
            name, data, expected = HOSTILE[i % len(HOSTILE)]
            try:
                status = raw_http(ports["http"], data)
            except OSError as e:
                status = None if None in expected else f"{e!r}"
            ok = status in expected
        if ok:
            local["refused"] += 1
        else:
            local["failures"].append(f"hostile {name}: got {status}")
    with lock:
        stats["hostile_refused"] += local["refused"]
        stats["failures"] += local["failures"]


def worker(tid, args, ports, stop, stats, lock):
    rng = np.random.default_rng(tid)
    g = grpcclient.InferenceServerClient(f"localhost:{ports['grpc']}")
    h = httpclient.InferenceServerClient(f"localhost:{ports['http']}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"localhost:{ports['grpc']}"))
    import http.client
    i = 0
    local = {"ok": 0, "bad_refused": 0, "failures": []}
    while not stop.is_set():
        i += 1
        use_grpc = i % 2 == 0
        if i % args.bad_every == 0:
            try:
                # The refusals tritonserver gives (docs/SERVER.md, the differential tests): an
                # unknown model is NOT_FOUND, a JSON `data` that disagrees with its shape 500.
                if use_grpc:
                    kind = i // args.bad_every
                    want = grpc.StatusCode.NOT_FOUND if kind % 4 == 2 else grpc.StatusCode.INVALID_ARGUMENT
                    stub.ModelInfer(malformed_grpc(kind), metadata=AUTH_METADATA)
                else:
                    body, headers = malformed_http(i // args.bad_every)
                    want_http = 500 if (i // args.bad_every) % 2 else 400
                    conn = http.client.HTTPConnection("localhost", ports["http"], timeout=30)
                    conn.request("POST", "/v2/models/add_sub/infer", body=body,
                                 headers={**headers, **AUTH})
                    status = conn.getresponse().status
                    conn.close()
                    if status == want_http:
                        local["bad_refused"] += 1
                        continue
                    raise RuntimeError(f"malformed HTTP request got {status}, not {want_http}")
                local["failures"].append("malformed gRPC request succeeded")
            except grpc.RpcError as e:
                if e.code() == want:
                    local["bad_refused"] += 1
                else:
                    local["failures"].append(f"malformed gRPC request: {e.code()} {e.details()}")
            except Exception as e:  # noqa: BLE001 - every surprise is a soak failure
                local["failures"].append(f"malformed request: {e!r}")
            continue
        a = rng.random((1, 4), dtype=np.float32)
        b = rng.random((1, 4), dtype=np.float32)
        try:
            lib = grpcclient if use_grpc else httpclient
            inputs = [lib.InferInput(f"INPUT{n}", [1, 4], "FP32") for n in range(2)]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            # A fresh dict: tritonclient's HTTP client adds its own headers to the one it is given.
            r = (g if use_grpc else h).infer("add_sub", inputs, headers=dict(AUTH))
            if not (np.array_equal(r.as_numpy("OUTPUT0"), a + b)
                    and np.array_equal(r.as_numpy("OUTPUT1"), a - b)):
                local["failures"].append("wrong answer")
            else:
                local["ok"] += 1
        except Exception as e:  # noqa: BLE001 - every surprise is a soak failure
            local["failures"].append(f"valid request failed ({'gRPC' if use_grpc else 'HTTP'}): {e!r}")
    with lock:
        stats["ok"] += local["ok"]
        stats["bad_refused"] += local["bad_refused"]
        stats["failures"] += local["failures"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"))
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--bad-every", type=int, default=5)
    ap.add_argument("--max-rss-growth", type=float, default=5.0)
    ap.add_argument("--rss-every", type=float, default=300.0,
                    help="print the server's RSS every this many seconds (0: never)")
    ap.add_argument("--hostile", type=int, default=0, help="threads sending issue 13's attacks")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        repo = os.path.join(work, "repo")
        models.add_sub(repo, "add_sub", "FP32", config='backend: "onnxruntime"\nmax_batch_size: 8\n'
                       'dynamic_batching { }\ninstance_group [ { count: 2 } ]')
        import onnx.helper as oh
        from onnx import TensorProto as T
        models._save(oh.make_graph(
            [oh.make_node("ConstantOfShape", ["COUNT"], ["OUTPUT0"],
                          value=oh.make_tensor("v", T.FLOAT, [1], [0.5]))],
            "expand", [oh.make_tensor_value_info("COUNT", T.INT64, [1])],
            [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, ["M"])]),
            os.path.join(repo, "expand", "1", "model.onnx"))
        ports = {"http": free_port(), "grpc": free_port()}
        proc = subprocess.Popen([args.kiln_serve, f"--model-repository={repo}",
                                 f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}",
                                 f"--metrics-port={free_port()}", "--http-bearer-token=t",
                                 f"--http-max-response-bytes={16 << 20}",
                                 "--http-read-timeout-secs=5"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_live(ports["http"], proc)
            stop, lock = threading.Event(), threading.Lock()
            stats = {"ok": 0, "bad_refused": 0, "hostile_refused": 0, "failures": []}
            threads = [threading.Thread(target=worker, args=(t, args, ports, stop, stats, lock))
                       for t in range(args.concurrency)]
            threads += [threading.Thread(target=hostile_worker,
                                         args=(t, args, ports, stop, stats, lock))
                        for t in range(args.hostile)]
            for t in threads:
                t.start()
            time.sleep(args.warmup)
            rss_start = rss_kib(proc.pid)
            live_failures = 0
            live = grpcclient.InferenceServerClient(f"localhost:{ports['grpc']}")
            deadline = time.time() + args.seconds
            rss_peak = rss_start
            next_report = time.time() + args.rss_every
            while time.time() < deadline:
                time.sleep(1)
                rss = rss_kib(proc.pid)
                rss_peak = max(rss_peak, rss)
                if args.rss_every and time.time() >= next_report:
                    # The curve, not only its ends: a leak grows steadily, warm-up levels off.
                    print(f"t={args.seconds - (deadline - time.time()):.0f}s rss_kib={rss}",
                          flush=True)
                    next_report += args.rss_every
                try:
                    live_failures += not live.is_server_live(client_timeout=10)
                except Exception:  # noqa: BLE001
                    live_failures += 1
            rss_end = rss_kib(proc.pid)
            stop.set()
            for t in threads:
                t.join()
        finally:
            proc.terminate()
            proc.wait(60)
    growth = 100.0 * (rss_end - rss_start) / rss_start
    print(f"seconds={args.seconds} concurrency={args.concurrency} valid_ok={stats['ok']} "
          f"malformed_refused={stats['bad_refused']} hostile_refused={stats['hostile_refused']} "
          f"failures={len(stats['failures'])} "
          f"live_failures={live_failures} rss_start_kib={rss_start} rss_end_kib={rss_end} "
          f"rss_peak_kib={rss_peak} rss_growth_pct={growth:.2f}")
    for f in stats["failures"][:10]:
        print("  failure:", f)
    bad = stats["failures"] or live_failures or growth > args.max_rss_growth
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
