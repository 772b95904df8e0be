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

    def run(*args):
        return subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=120)

    return run
