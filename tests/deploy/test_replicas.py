"""Replicas behind a real load balancer (issue 14, item 8; docs/DEPLOY.md): Debian's nginx with
the shipped deploy/nginx/kiln.conf in front of three kiln-serve replicas on loopback, 32 clients
busy throughout, while one replica drains and restarts (no request may fail) or is killed and
restarted (only requests in flight on it may fail). The driver is bench/server/replicas.py; this
runs it shorter and asserts its checks.

Environment (as `make test-replicas` sets it): KILN_SERVE, the kiln-serve binary (default
build/src/kiln-serve); REPLICA_SECONDS, how long each scenario keeps the load on (default 12; the
measurement in bench/results runs 60). Not pytest options: tests/server's conftest declares
--kiln-serve, and two conftest modules would collide in one pytest run over both directories."""
import os
import signal
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "server"))
import replica_report  # noqa: E402
import replicas  # noqa: E402
from replica_cluster import EXAMPLE_CONF, Cluster, Nginx, render_config  # noqa: E402


SECONDS = float(os.environ.get("REPLICA_SECONDS", "12"))


@pytest.fixture(scope="module")
def kiln_serve():
    path = os.environ.get("KILN_SERVE", os.path.join(ROOT, "build", "src", "kiln-serve"))
    if not os.access(path, os.X_OK):  # fail, not skip: `make test-replicas` builds it first
        pytest.fail(f"no kiln-serve at {path}: build it (make build) or set KILN_SERVE")
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("replicas"))


def run(kiln_serve, workdir, name):
    report = replicas.run_scenario(name, kiln_serve, workdir, SECONDS, concurrency=32)
    print(replica_report.render(report))  # the counts, with -s or on failure
    return report


def test_example_config_is_valid_nginx(tmp_path):
    nginx = Nginx(str(tmp_path), [18000, 18010, 18020], [18001, 18011, 18021])
    nginx.check()  # nginx -t on the example, as the tests run it
    conf = open(os.path.join(nginx.prefix, "kiln.conf")).read()
    assert "server 127.0.0.1:18010 max_fails=1" in conf and "server 127.0.0.1:18021" in conf


def test_config_rewrite_refuses_a_different_example():
    text = open(EXAMPLE_CONF).read()
    with pytest.raises(ValueError, match="lists 3 servers, the test runs 2"):
        render_config(text, [1, 2], [3, 4], 5, 6)
    with pytest.raises(ValueError, match="listen on 8080"):
        render_config(text.replace("listen 8080;", "listen 9090;"), [1, 2, 3], [4, 5, 6], 7, 8)
    with pytest.raises(ValueError, match="non_idempotent"):
        render_config(text.replace(" non_idempotent;", ";"), [1, 2, 3], [4, 5, 6], 7, 8,
                      retry_post=False)


def test_both_protocols_through_the_proxy(kiln_serve, workdir):
    repo = os.path.join(workdir, "repo-smoke")
    replicas.make_repo(repo, 100)
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    b = np.full((2, 4), 5, np.int32)
    with Cluster(kiln_serve, repo, os.path.join(workdir, "smoke")) as cluster:
        for client, module in ((httpclient.InferenceServerClient(
                f"127.0.0.1:{cluster.nginx.http_port}"), httpclient),
                               (grpcclient.InferenceServerClient(
                                   f"127.0.0.1:{cluster.nginx.grpc_port}"), grpcclient)):
            assert client.is_server_ready()
            inputs = [module.InferInput("INPUT0", [2, 4], "INT32"),
                      module.InferInput("INPUT1", [2, 4], "INT32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            for _ in range(6):  # round robin: every replica answers at least once
                r = client.infer("add_sub", inputs)
                assert (r.as_numpy("OUTPUT0") == a + b).all()
                assert (r.as_numpy("OUTPUT1") == a - b).all()


def test_drain_loses_no_request(kiln_serve, workdir):
    report = run(kiln_serve, workdir, "drain")
    assert report["problems"] == [], replica_report.render(report)
    assert report["failures"] == {}


def test_kill_fails_only_requests_in_flight_on_it(kiln_serve, workdir):
    report = run(kiln_serve, workdir, "kill")
    assert report["problems"] == [], replica_report.render(report)
    failed = sum(report["failures"].values())
    assert failed <= report["in_flight_on_target_at_signal"] <= 32


def good_report(scenario):
    return {"scenario": scenario, "target": 1, "concurrency": 32, "failures": {},
            "exit_code": 0 if scenario == "drain" else -signal.SIGKILL,
            "failures_outside_target_in_flight": 0, "in_flight_at_signal": 20,
            "per_replica_before_signal": {"0": 5, "1": 5, "2": 5},
            "per_replica_after_return": {"0": 5, "1": 5, "2": 5}}


@pytest.mark.parametrize("scenario,change,expect", [
    ("drain", {"failures": {"http_502": 1}}, "failed while a replica drained"),
    ("drain", {"failures": {"wrong": 1}}, "answers were wrong"),
    ("drain", {"exit_code": 1}, "exited 1, not 0"),
    ("kill", {"failures_outside_target_in_flight": 2}, "not in flight on the killed replica"),
    ("kill", {"failures": {"wrong": 1}}, "answers were wrong"),
    ("kill", {"exit_code": 0}, "not by SIGKILL"),
    ("kill", {"in_flight_at_signal": 0}, "tested nothing"),
    ("kill", {"in_flight_at_signal": 33}, "more than the concurrency"),
    ("drain", {"per_replica_before_signal": {"0": 5, "1": 0, "2": 5}}, "not balanced"),
    ("drain", {"per_replica_after_return": {"0": 5, "1": 0, "2": 5}}, "after it came back"),
])
def test_checks_catch_what_they_guard(scenario, change, expect):
    assert replica_report.check(good_report(scenario)) == []
    problems = replica_report.check({**good_report(scenario), **change})
    assert any(expect in p for p in problems), problems
