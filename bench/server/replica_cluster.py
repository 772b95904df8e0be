"""Three (or N) `kiln-serve` replicas on loopback behind Debian's nginx, run with the shipped
example config deploy/nginx/kiln.conf (only its addresses and listen ports rewritten), from a
scratch directory: own prefix, pid, logs and temp paths, `daemon off`, so it needs no root and
leaves nothing behind. Used by bench/server/replicas.py."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE_CONF = os.path.join(ROOT, "deploy", "nginx", "kiln.conf")

_given_ports = set()


def free_port():
    """A port the kernel calls free and this process has not handed out yet (the kernel may offer
    a just-closed port twice, and a replica's three ports are picked one after another)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given_ports:
            _given_ports.add(port)
            return port


def _get(port, path, timeout=1.0):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Replica:
    """One kiln-serve process; restart() brings it back on the same ports, as a rolling update
    or a supervisor does."""

    def __init__(self, binary, repo, workdir, index, extra_args=()):
        self.binary, self.repo, self.index = binary, repo, index
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.extra_args = list(extra_args)
        self.log_path = os.path.join(workdir, f"replica{index}.log")
        self.proc = None
        self.starts = 0

    def start(self):
        cmd = [self.binary, f"--model-repository={self.repo}", "--http-address=127.0.0.1",
               "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
               f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
               f"--metrics-port={self.metrics_port}", *self.extra_args]
        log = open(self.log_path, "a")
        log.write(f"--- start {self.starts}: {' '.join(cmd)}\n")
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.starts += 1
        return self

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.index} exited with {self.proc.returncode}:\n"
                                   f"{self.output()}")
            if _get(self.http_port, "/v2/health/ready") == 200:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"replica {self.index} did not become ready:\n{self.output()}")

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


def render_config(example_text, http_ports, grpc_ports, listen_http, listen_grpc,
                  retry_post=True):
    """The example config with its upstream servers and listen ports replaced. Every rewrite
    must match exactly as often as expected, so a changed example fails here loudly instead of
    running the test against something else. retry_post=False drops `non_idempotent` from
    proxy_next_upstream: the experiment that shows why the example has it."""
    def upstream(name, ports, text):
        block = re.search(r"upstream %s \{.*?\n\}" % name, text, re.S)
        if not block:
            raise ValueError(f"deploy/nginx/kiln.conf has no 'upstream {name}' block")
        servers = re.findall(r"^\s*server 127\.0\.0\.1:\d+", block.group(0), re.M)
        if len(servers) != len(ports):
            raise ValueError(f"upstream {name} lists {len(servers)} servers, the test runs "
                             f"{len(ports)} replicas")
        it = iter(ports)
        new = re.sub(r"(^\s*server )127\.0\.0\.1:\d+",
                     lambda m: f"{m.group(1)}127.0.0.1:{next(it)}", block.group(0), flags=re.M)
        return text[:block.start()] + new + text[block.end():]

    text = upstream("kiln_http", http_ports, example_text)
    text = upstream("kiln_grpc", grpc_ports, text)
    text, n_http = re.subn(r"^(\s*)listen 8080;", rf"\g<1>listen 127.0.0.1:{listen_http};",
                           text, flags=re.M)
    text, n_grpc = re.subn(r"^(\s*)listen 8081 http2;",
                           rf"\g<1>listen 127.0.0.1:{listen_grpc} http2;", text, flags=re.M)
    if (n_http, n_grpc) != (1, 1):
        raise ValueError("deploy/nginx/kiln.conf must listen on 8080 (HTTP) and 8081 (gRPC) once")
    if not retry_post:
        text, n = re.subn(r"(proxy_next_upstream [^;]*) non_idempotent;", r"\1;", text)
        if n != 1:
            raise ValueError("deploy/nginx/kiln.conf has no proxy_next_upstream ... non_idempotent")
    return text


# What the test adds around the example: where nginx keeps its files, no daemon, and an access
# log that records which replicas each request tried.
MAIN_CONF = """\
daemon off;
worker_processes auto;  # as Debian's nginx.conf: one per core
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format upstreams '$msec $status $request_time "$upstream_addr" "$upstream_status"';
    access_log {prefix}/access.log upstreams buffer=256k flush=1s;
    client_body_temp_path {prefix}/temp/body;
    proxy_temp_path {prefix}/temp/proxy;
    fastcgi_temp_path {prefix}/temp/fastcgi;
    uwsgi_temp_path {prefix}/temp/uwsgi;
    scgi_temp_path {prefix}/temp/scgi;
    include {prefix}/kiln.conf;
}}
"""


def nginx_binary():
    for path in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if path and os.access(path, os.X_OK):
            return path
    raise RuntimeError("nginx is not installed: run scripts/setup.sh (Debian's nginx package)")


class Nginx:
    def __init__(self, workdir, http_ports, grpc_ports, retry_post=True):
        self.prefix = os.path.join(workdir, "nginx")
        os.makedirs(os.path.join(self.prefix, "temp"), exist_ok=True)
        self.http_port, self.grpc_port = free_port(), free_port()
        with open(EXAMPLE_CONF) as f:
            conf = render_config(f.read(), http_ports, grpc_ports, self.http_port, self.grpc_port,
                                 retry_post)
        with open(os.path.join(self.prefix, "kiln.conf"), "w") as f:
            f.write(conf)
        with open(os.path.join(self.prefix, "nginx.conf"), "w") as f:
            f.write(MAIN_CONF.format(prefix=self.prefix))
        self.proc = None

    def command(self):
        # -e: the error log before the config is read (the default is a system path).
        return [nginx_binary(), "-p", self.prefix, "-c", os.path.join(self.prefix, "nginx.conf"),
                "-e", os.path.join(self.prefix, "error.log")]

    def check(self):
        r = subprocess.run(self.command() + ["-t"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nginx -t refused the config:\n{r.stderr}")

    def start(self, timeout=30):
        self.check()
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.proc.returncode}:\n{self.errors()}")
            if _get(self.http_port, "/v2/health/ready") == 200:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"nginx did not answer:\n{self.errors()}")

    def errors(self):
        path = os.path.join(self.prefix, "error.log")
        return open(path).read() if os.path.exists(path) else ""

    def stop(self):
        # SIGQUIT: nginx's graceful shutdown (flushes the access log).
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cluster:
    """Replicas and the proxy, stopped together (a context manager)."""

    def __init__(self, binary, repo, workdir, replicas=3, extra_args=(), retry_post=True):
        self.replicas = [Replica(binary, repo, workdir, i, extra_args) for i in range(replicas)]
        self.nginx = Nginx(workdir, [r.http_port for r in self.replicas],
                           [r.grpc_port for r in self.replicas], retry_post)

    def __enter__(self):
        try:
            for r in self.replicas:
                r.start()
            for r in self.replicas:
                r.wait_ready()
            self.nginx.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.nginx.stop()
        for r in self.replicas:
            r.stop()

    def replica_of_port(self, port):
        for r in self.replicas:
            if r.http_port == port:
                return r.index
        return None
