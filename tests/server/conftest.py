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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    for s in started:
        s.stop()
