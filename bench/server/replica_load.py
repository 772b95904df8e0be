"""Closed-loop load through the proxy: `concurrency` clients, each one keep-alive HTTP/1.1
connection sending one inference after another until a deadline, spread over several processes
so that Python's GIL does not make the load generator the bottleneck.

Every request carries inputs no other request carries (its client and sequence number), and its
answer is checked element by element: a response that reached the wrong client, or was computed
from another request's inputs, counts as wrong, not as a success.

One record per request: (start, end, outcome, upstream addresses, upstream statuses), times from
time.monotonic(), which is one clock for every process on the host. outcome is "ok", "wrong",
"http_<status>" or "error:<exception type>"."""
import http.client
import json
import multiprocessing
import threading
import time

MODEL = "add_sub"  # replicas.make_repo: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1


def request_inputs(client, seq):
    """INT32 rows no other request of the run carries (client < 2^10, seq < 2^20)."""
    a = [(client << 20 | seq) + i for i in range(4)]
    b = [-(seq * 7 + i) for i in range(4)]
    return a, b


def request_body(a, b):
    return json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", "data": a},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "INT32", "data": b},
    ]}).encode()


def answer_is_right(body, a, b):
    try:
        outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    except (ValueError, KeyError, TypeError):
        return False
    return (outputs.get("OUTPUT0") == [x + y for x, y in zip(a, b)] and
            outputs.get("OUTPUT1") == [x - y for x, y in zip(a, b)])


def client_loop(port, client, deadline, records):
    path = f"/v2/models/{MODEL}/infer"
    conn = None
    seq = 0
    while time.monotonic() < deadline:
        a, b = request_inputs(client, seq)
        seq += 1
        body = request_body(a, b)
        upstream = status_list = ""
        start = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            upstream = r.getheader("X-Kiln-Upstream", "")
            status_list = r.getheader("X-Kiln-Upstream-Status", "")
            if r.status != 200:
                outcome = f"http_{r.status}"
            else:
                outcome = "ok" if answer_is_right(data, a, b) else "wrong"
            if r.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            outcome = f"error:{type(e).__name__}"
            if conn is not None:
                conn.close()
            conn = None
        records.append((start, time.monotonic(), outcome, upstream, status_list))
    if conn is not None:
        conn.close()


def _process(port, first_client, clients, deadline, out):
    records = []
    threads = [threading.Thread(target=client_loop, args=(port, first_client + i, deadline, records))
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((time.process_time(), records))


class Load:
    """start() returns at once; the clients run until `seconds` have passed; join() returns the
    records of all of them."""

    def __init__(self, port, concurrency, seconds, processes=4):
        self.port, self.concurrency, self.seconds = port, concurrency, seconds
        self.processes = max(1, min(processes, concurrency))
        self.procs = []
        self.started = None

    def start(self):
        ctx = multiprocessing.get_context("fork")
        self.out = ctx.Queue()
        self.started = time.monotonic()
        deadline = self.started + self.seconds
        per, extra = divmod(self.concurrency, self.processes)
        first = 0
        for p in range(self.processes):
            n = per + (p < extra)
            proc = ctx.Process(target=_process, args=(self.port, first, n, deadline, self.out))
            proc.start()
            self.procs.append(proc)
            first += n
        return self

    def join(self):
        """The records, sorted by start time; self.cpu_seconds is what the clients' processes
        spent (to tell whether the load generator could have been the bottleneck)."""
        records = []
        self.cpu_seconds = 0.0
        # Read before joining: a child blocks in put() until its records are taken.
        for _ in self.procs:
            cpu, part = self.out.get(timeout=self.seconds + 300)
            self.cpu_seconds += cpu
            records.extend(part)
        for proc in self.procs:
            proc.join()
        return sorted(records)
