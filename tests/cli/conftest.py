import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))


def pytest_addoption(parser):
    parser.addoption("--kiln", default=os.path.join(ROOT, "build", "src", "kiln"),
                     help="path of the kiln binary")


@pytest.fixture(scope="session")
def kiln(request):
    path = os.path.abspath(request.config.getoption("--kiln"))
    assert os.path.exists(path), f"build kiln first: {path}"

    def run(*args, env=None):
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        return subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=120,
                              env=full_env)

    return run


@pytest.fixture
def demo(tmp_path):
    """The demo CNN (tools/make_demo_model.py) written to tmp_path/demo.onnx."""
    import make_demo_model
    path = tmp_path / "demo.onnx"
    make_demo_model.build(str(path))
    return path
