"""What kiln-serve prints about its models, as tritonserver does: one line per model version
loaded or model that failed, whichever way the load came, and a Model / Version / Status table
once the startup loads are done, before the services open."""
import re
import time

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import models


def table_rows(out):
    """The rows of the model table: [(model, version, status), ...]."""
    lines = out.splitlines()
    header = next(i for i, l in enumerate(lines) if re.match(r"\| Model +\| Version +\| Status", l))
    assert re.fullmatch(r"\+-+\+-+\+-+\+", lines[header - 1]) and lines[header + 1] == lines[header - 1]
    rows = []
    for line in lines[header + 2:]:
        if line.startswith("+"):
            break
        rows.append(tuple(cell.strip() for cell in line.strip("|").split("|", 2)))
    return rows


@pytest.fixture(scope="module")
def started(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_constant(repo, "two", [1, 2], 'version_policy: { all: { } }')
    models.add_sub(repo, "simple", "FP32")
    # A config naming an input the model lacks: the load fails, the server keeps the others.
    models.add_constant(repo, "broken", [1], 'backend: "onnxruntime"\ninput [ { name: "NOPE" '
                        'data_type: TYPE_FP32 dims: [ 4 ] } ]')
    server = serve(repo, "--exit-on-error=false")
    server.repo = repo
    return server


def test_a_line_per_version_loaded_and_per_model_that_failed(started):
    out = started.output()
    for model, version in [("two", 1), ("two", 2), ("simple", 1)]:
        assert re.search(rf"kiln-serve: successfully loaded '{model}' version {version} \(\S+"
                         rf"{model}/{version}/model\.onnx\)", out), out
    failed = re.findall(r"kiln-serve: failed to load 'broken': (.*)", out)
    assert len(failed) == 1 and "NOPE" in failed[0], out


def test_the_table_lists_every_model_with_its_version_and_status_before_the_services(started):
    out = started.output()
    rows = table_rows(out)
    assert [(m, v) for m, v, _ in rows] == [("broken", "-"), ("simple", "1"), ("two", "1"),
                                            ("two", "2")]
    assert [s for m, _, s in rows if m != "broken"] == ["READY"] * 3
    broken = rows[0][2]
    assert broken.startswith("UNAVAILABLE: ") and "NOPE" in broken
    assert out.index("| Model") < out.index("Started HTTPService")


def test_a_load_through_the_api_prints_its_line_too(serve, tmp_path):
    repo = str(tmp_path / "repo")
    models.add_constant(repo, "c", [1])
    models.add_constant(repo, "bad", [1], 'backend: "onnxruntime"\ninput [ { name: "NOPE" '
                        'data_type: TYPE_FP32 dims: [ 4 ] } ]')
    server = serve(repo, "--model-control-mode=explicit")
    assert table_rows(server.output()) == [("bad", "-", "UNAVAILABLE"), ("c", "-", "UNAVAILABLE")]
    c = server.client()
    c.load_model("c")
    with pytest.raises(InferenceServerException):
        c.load_model("bad")
    c.unload_model("c")
    deadline = time.time() + 30
    while "unloaded 'c'" not in server.output() and time.time() < deadline:
        time.sleep(0.05)
    out = server.output()
    assert re.search(r"successfully loaded 'c' version 1 ", out), out
    assert len(re.findall(r"failed to load 'bad': .*NOPE", out)) == 1, out
    assert "kiln-serve: unloaded 'c' version 1 (unloaded)" in out, out


def test_an_empty_repository_says_so(serve, tmp_path):
    (tmp_path / "empty").mkdir()
    server = serve(str(tmp_path / "empty"))
    assert "No models in the model repository" in server.output()
