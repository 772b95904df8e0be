"""The real Triton Inference Server for the differential tests: find (or install, through
scripts/install_triton.sh) the `tritonserver` of the nvidia-pytriton 0.7.0 wheel, lay out its
backend folder as pytriton's launcher does, and start it on free ports. Every reason it cannot run
becomes a pytest skip with that reason, never a failure."""
import ctypes.util
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, free_port

INSTALL_SCRIPT = os.path.join(ROOT, "scripts", "install_triton.sh")
DEFAULT_HOME = os.path.expanduser("~/.cache/kiln/pytriton-0.7.0")
_install_failure = None  # one failed install per session: every module skips with its reason


def _home():
    """The folder holding the unpacked wheel: $KILN_TRITON_HOME, else the cache, installed there
    on first use unless KILN_TRITON_INSTALL=0."""
    home = os.environ.get("KILN_TRITON_HOME", DEFAULT_HOME)
    if os.path.exists(os.path.join(home, "pytriton", "tritonserver", "bin", "tritonserver")):
        return home
    global _install_failure
    if _install_failure:
        pytest.skip(_install_failure)
    if os.environ.get("KILN_TRITON_INSTALL", "1") == "0":
        pytest.skip(f"Triton differential tests: no tritonserver under {home} and "
                    "KILN_TRITON_INSTALL=0 (run scripts/install_triton.sh)")
    try:
        subprocess.run([INSTALL_SCRIPT, home], check=True, capture_output=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", b"") or b""
        _install_failure = (f"Triton differential tests: cannot install nvidia-pytriton 0.7.0 "
                            f"({e}; {err.decode(errors='replace')[-400:]})")
        pytest.skip(_install_failure)
    return home


def _interpreter(version):
    """The `pythonX.Y` the stub's embedded interpreter will take its prefix (and numpy) from:
    the system's first, as the stub links the system libpython."""
    for path in ("/usr/bin:/usr/local/bin", os.environ.get("PATH", "")):
        exe = shutil.which(f"python{version}", path=path)
        if exe and subprocess.run([exe, "-c", "import numpy"], capture_output=True).returncode == 0:
            return exe
    return None


def _stub(tritonserver_dir):
    """(stub, interpreter): the Python backend stub for an interpreter this machine has, with
    numpy (model.py imports it)."""
    stubs = os.path.join(tritonserver_dir, "python_backend_stubs")
    versions = [f"{sys.version_info.major}.{sys.version_info.minor}"]
    versions += sorted(os.listdir(stubs), reverse=True) if os.path.isdir(stubs) else []
    for v in versions:
        path = os.path.join(stubs, v, "triton_python_backend_stub")
        if os.path.exists(path) and ctypes.util.find_library(f"python{v}"):
            exe = _interpreter(v)
            if exe:
                return path, exe
    pytest.skip(f"Triton differential tests: no python with libpython and numpy for any stub "
                f"in {stubs}")


def backend_dir(tmp):
    """A copy of the wheel's backends with the stub in place (what pytriton's launcher does);
    the wheel's own folder stays untouched."""
    home = _home()
    tdir = os.path.join(home, "pytriton", "tritonserver")
    out = os.path.join(tmp, "backends")
    stub, exe = _stub(tdir)
    if not os.path.exists(out):
        shutil.copytree(os.path.join(tdir, "backends"), out)
        shutil.copy(stub, os.path.join(out, "python", "triton_python_backend_stub"))
    return home, out, exe


class Triton:
    """One tritonserver process; the same surface as conftest.Server where the tests use it."""

    def __init__(self, tmp, repo, args):
        home, backends, python = backend_dir(tmp)
        binary = os.path.join(home, "pytriton", "tritonserver", "bin", "tritonserver")
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.url = f"localhost:{self.http_port}"
        self.grpc_url = f"localhost:{self.grpc_port}"
        env = dict(os.environ)
        libs = os.path.join(home, "nvidia_pytriton.libs")
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (env.get("LD_LIBRARY_PATH"), libs) if p)
        # As pytriton's launcher: the stub's interpreter first on PATH, nothing else's prefix.
        env["PATH"] = os.path.dirname(python) + ":" + env.get("PATH", "")
        for var in ("PYTHONHOME", "PYTHONPATH"):
            env.pop(var, None)
        cmd = [binary, f"--model-repository={repo}", f"--backend-directory={backends}",
               f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
               f"--metrics-port={self.metrics_port}", "--allow-gpu-metrics=false", *args]
        self.log_path = os.path.join(tmp, f"triton-{self.http_port}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, timeout=180):
        """Live on HTTP and gRPC (the Python stubs take seconds each to start)."""
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                # Our own models failing to load is the test's bug, not a missing server.
                failed = [l for l in self.output().splitlines() if "failed to load '" in l]
                assert not failed, "tritonserver refused a test model:\n" + "\n".join(failed)
                pytest.skip(f"Triton differential tests: tritonserver exited with "
                            f"{self.proc.returncode}: {self.output()[-1500:]}")
            try:
                if (httpclient.InferenceServerClient(self.url).is_server_live() and
                        grpcclient.InferenceServerClient(self.grpc_url).is_server_live()):
                    return self
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.2)
        self.stop()
        pytest.skip(f"Triton differential tests: tritonserver did not come up in {timeout} s: "
                    f"{self.output()[-1500:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
