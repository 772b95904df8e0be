"""Options for tests/deploy/test_replicas.py (`make test-replicas`); test_manifests.py needs none."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_addoption(parser):
    # tests/server/conftest.py declares --kiln-serve too: one pytest run over both directories
    # must not fail on the second declaration.
    try:
        parser.addoption("--kiln-serve", default=os.path.join(ROOT, "build", "src", "kiln-serve"),
                         help="path of the kiln-serve binary")
    except ValueError:
        pass
    parser.addoption("--replica-seconds", type=float, default=12,
                     help="how long each replica scenario keeps the load on (the measurement "
                          "in bench/results runs 60)")
