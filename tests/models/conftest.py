"""Real models, small sizes: exported once per change of the export scripts and cached in the
build directory (BUILD/models), then checked through Kiln in tests/models/test_models.py."""
import hashlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools", "models")
sys.path.insert(0, TOOLS)

from suite import SYSTEM_PYTHON, case_names  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--build-dir", default=os.path.join(ROOT, "build"),
                     help="Kiln build directory (kiln, kiln_model_check; cache in BUILD/models)")


@pytest.fixture(scope="session")
def build_dir(request):
    return os.path.abspath(request.config.getoption("--build-dir"))


@pytest.fixture(scope="session")
def tools(build_dir):
    paths = {"kiln": os.path.join(build_dir, "src", "kiln"),
             "check": os.path.join(build_dir, "tests", "kiln_model_check")}
    for p in paths.values():
        assert os.path.exists(p), f"build Kiln first: {p} is missing"
    return paths


def _stamp():
    h = hashlib.sha256()
    for name in ("export_models.py", "make_cases.py", "suite.py"):
        with open(os.path.join(TOOLS, name), "rb") as f:
            h.update(f.read())
    h.update(repr(case_names()).encode())  # KILN_MODELS_ALL changes the list
    return h.hexdigest()


@pytest.fixture(scope="session")
def cases_dir(build_dir):
    """BUILD/models/cases/NAME: model.onnx + onnxruntime's outputs; rebuilt when the export
    scripts or the list of cases change."""
    root = os.path.join(build_dir, "models")
    cases = os.path.join(root, "cases")
    stamp_path = os.path.join(root, "stamp")
    stamp = _stamp()
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp and \
            all(os.path.isdir(os.path.join(cases, c)) for c in case_names()):
        return cases
    onnx_dir = os.path.join(root, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    if not os.path.exists(SYSTEM_PYTHON) or subprocess.run(
            [SYSTEM_PYTHON, "-c", "import torch, torchvision"], capture_output=True).returncode:
        pytest.fail("python3-torch and python3-torchvision are missing: run scripts/setup.sh")
    only = ",".join(c for c in case_names() if not c.startswith("light_"))
    subprocess.run([SYSTEM_PYTHON, os.path.join(TOOLS, "export_models.py"), "--out", onnx_dir,
                    "--small", "--only", only], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    light = ",".join(c for c in case_names() if c.startswith("light_"))
    subprocess.run([sys.executable, os.path.join(TOOLS, "make_cases.py"), "--models", onnx_dir,
                    "--out", cases, "--light", "--only", only + "," + light], check=True,
                   stdout=subprocess.DEVNULL)
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return cases


@pytest.fixture(scope="session")
def results_dir(build_dir):
    path = os.path.join(build_dir, "models", "results")
    os.makedirs(path, exist_ok=True)
    return path
