"""Fixtures: start `kiln-serve` on free ports against a repository generated in the test."""
import http.client
import os
import signal
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_addoption(parser):
    parser.addoption("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"),
                     help="path of the kiln-serve binary")


_given_ports = set()


def free_port():
    """A port the kernel calls free that this process has not handed out before: a server's
    HTTP, metrics and gRPC ports are picked one after another, and the kernel may offer the same
    just-closed port twice (it did: gRPC then found its port taken by HTTP)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given_ports:
            _given_ports.add(port)
            return port


class Server:
    def __init__(self, binary, repo, args, log_path):
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.url = f"localhost:{self.http_port}"
        # gRPC stays off unless a test asks for it with --grpc-port (tests/server/grpc_util.py).
        grpc = [] if any(a.startswith("--grpc-port") for a in args) else ["--allow-grpc=false"]
        cmd = [binary, f"--model-repository={repo}", f"--http-port={self.http_port}",
               f"--metrics-port={self.metrics_port}", *grpc, *args]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_live(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kiln-serve exited with {self.proc.returncode}: {self.output()}")
            try:
                if self.request("GET", "/v2/health/live")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"kiln-serve did not come up: {self.output()}")

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, port=None, timeout=60):
        conn = http.client.HTTPConnection("localhost", port or self.http_port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            conn.close()

    def pending(self, model):
        """nv_inference_pending_request_count of `model` (queued or executing; 0 before the
        metric shows the model)."""
        _, body, _ = self.request("GET", "/metrics", port=self.metrics_port)
        prefix = f'nv_inference_pending_request_count{{model="{model}",'
        line = [l for l in body.decode().splitlines() if l.startswith(prefix)]
        return int(line[0].split()[-1]) if line else 0

    def wait_pending(self, model, n, timeout=120):
        """Waits until at least `n` requests of `model` are pending: the server has accepted
        them, so what a test sends next arrives after them whatever the machine's load."""
        deadline = time.time() + timeout
        while self.pending(model) < n:
            assert time.time() < deadline, f"{model}: never {n} pending"
            time.sleep(0.002)

    def client(self, **kwargs):
        import tritonclient.http as httpclient
        return httpclient.InferenceServerClient(self.url, **kwargs)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def serve(request, tmp_path_factory):
    """serve(repo, *args) starts a server and waits until it is live; all stop at module end."""
    binary = os.path.abspath(request.config.getoption("--kiln-serve"))
    assert os.path.exists(binary), f"build kiln-serve first: {binary}"
    started = []

    def start(repo, *args, wait=True):
        log = tmp_path_factory.mktemp("log") / "server.log"
        s = Server(binary, repo, list(args), str(log))
        started.append(s)
        return s.wait_live() if wait else s

    yield start
    problems = []
    for s in started:
        was_running = s.proc.poll() is None
        code = s.stop()
        out = s.output()
        # A clean SIGTERM exits 0; sanitizer builds (make fuzz-build) also report here.
        if was_running and code != 0:
            problems.append(f"exit code {code} after SIGTERM:\n{out[-3000:]}")
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if marker in out:
                problems.append(out[out.index(marker) - 200:][:4000])
    assert not problems, "\n".join(problems)
