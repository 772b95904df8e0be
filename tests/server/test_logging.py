"""Triton's logging extension: --log-* flags, /v2/logging and gRPC LogSettings read and change
the server's log at run time; bad settings are refused whole and change nothing."""
import json
import re

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import grpc_util
import models

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(path, "simple", "FP32")
    return path


@pytest.fixture(scope="module")
def untouched(serve, repo):
    """One server for the refusals: none of them may change its settings."""
    return serve(repo)


def settings(server):
    status, body, headers = server.request("GET", "/v2/logging")
    assert status == 200 and headers["Content-Type"] == "application/json", body
    return json.loads(body)


def post(server, changes):
    status, body, _ = server.request("POST", "/v2/logging", body=json.dumps(changes))
    return status, json.loads(body)


def infer(server):
    c = httpclient.InferenceServerClient(server.url)
    a = np.ones((1, 4), np.float32)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32").set_data_from_numpy(a)
              for n in ("INPUT0", "INPUT1")]
    c.infer("simple", inputs)


def test_defaults_are_tritonservers_and_the_extension_is_listed(serve, repo):
    server = serve(repo)
    assert settings(server) == DEFAULTS
    assert "logging" in json.loads(server.request("GET", "/v2")[1])["extensions"]
    # Information lines in the default format: severity, date, time, thread, file:line.
    assert re.search(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ repository\.cpp:\d+\] kiln-serve: "
                     r"successfully loaded 'simple' version 1", server.output(), re.M), \
        server.output()


def test_verbose_level_set_over_http_logs_each_request(serve, repo):
    server = serve(repo)
    infer(server)
    assert "HTTP request: POST /v2/models/simple/infer" not in server.output()
    status, now = post(server, {"log_verbose_level": 1, "log_format": "ISO8601"})
    assert status == 200 and now == dict(DEFAULTS, log_verbose_level=1, log_format="ISO8601")
    infer(server)
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I http_server\.cpp:\d+\] HTTP request: "
                     r"POST /v2/models/simple/infer$", server.output(), re.M), server.output()
    status, now = post(server, {"log_verbose_level": 0})
    assert status == 200 and now["log_verbose_level"] == 0 and now["log_format"] == "ISO8601"
    before = server.output().count("HTTP request: POST")
    infer(server)
    assert server.output().count("HTTP request: POST") == before


@pytest.mark.parametrize("changes,why", [
    ({"log_format": "xml"}, "log_format 'xml'"),
    ({"log_colour": True}, "unknown log setting 'log_colour'"),
    ({"log_info": "yes"}, "'log_info' takes a boolean"),
    ({"log_verbose_level": -1}, "must be a boolean, an unsigned integer or a string"),
    ({"log_verbose_level": 2 ** 40}, "unsigned 32-bit integer"),
    ({"log_verbose_level": 3, "log_file": "/nonexistent-dir/kiln.log"}, "cannot be opened"),
])
def test_a_bad_setting_is_refused_and_nothing_changes(untouched, changes, why):
    status, body = post(untouched, changes)
    assert status == 400 and why in body["error"], body
    assert settings(untouched) == DEFAULTS


def test_a_body_that_is_no_object_and_other_methods(serve, repo):
    server = serve(repo)
    assert server.request("POST", "/v2/logging", body="[1]")[0] == 400
    assert server.request("POST", "/v2/logging", body="{bad")[0] == 500  # tritonserver's status
    assert server.request("DELETE", "/v2/logging")[0] == 405
    assert settings(server) == DEFAULTS


def test_log_file_takes_the_lines_that_follow(serve, repo, tmp_path):
    server = serve(repo)
    path = tmp_path / "kiln.log"
    status, now = post(server, {"log_file": str(path), "log_verbose_level": 1})
    assert status == 200 and now["log_file"] == str(path)
    infer(server)
    assert "HTTP request: POST /v2/models/simple/infer" in path.read_text()
    status, now = post(server, {"log_file": ""})
    assert status == 200 and now["log_file"] == ""
    lines = path.read_text().count("\n")
    infer(server)
    assert path.read_text().count("\n") == lines
    assert "HTTP request: POST /v2/models/simple/infer" in server.output()


def test_flags_set_the_starting_settings(serve, repo):
    server = serve(repo, "--log-verbose=1", "--log-info=false", "--log-format=ISO8601")
    assert settings(server) == dict(DEFAULTS, log_info=False, log_verbose_level=1,
                                    log_format="ISO8601")
    out = server.output()
    assert "successfully loaded 'simple'" not in out, out  # information lines are off
    assert "HTTP request: GET /v2/logging" in out, out  # verbose ones are on


def test_grpc_log_settings(serve, repo):
    server = grpc_util.start(serve, repo)
    with server.grpc_client() as c:
        assert c.get_log_settings(as_json=True)["settings"] == {
            "log_file": {"string_param": ""}, "log_info": {"bool_param": True},
            "log_warning": {"bool_param": True}, "log_error": {"bool_param": True},
            "log_verbose_level": {"uint32_param": 0}, "log_format": {"string_param": "default"}}
        got = c.update_log_settings({"log_verbose_level": 1, "log_warning": False}, as_json=True)
        assert got["settings"]["log_verbose_level"] == {"uint32_param": 1}
        assert got["settings"]["log_warning"] == {"bool_param": False}
        assert settings(server)["log_verbose_level"] == 1
        assert "gRPC request: logging" not in server.output()  # logged at level 0
        c.get_log_settings()
        assert "gRPC request: logging" in server.output()
        with pytest.raises(InferenceServerException) as e:
            c.update_log_settings({"log_format": "xml", "log_verbose_level": 0})
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "log_format" in str(e.value)
        assert settings(server)["log_verbose_level"] == 1


def test_logging_is_a_restricted_api_category(serve, repo):
    server = serve(repo, "--http-restricted-api=logging:admin-key=secret")
    assert server.request("GET", "/v2/logging")[0] == 403
    status, body, _ = server.request("GET", "/v2/logging", headers={"admin-key": "secret"})
    assert status == 200 and json.loads(body) == DEFAULTS
