"""Model files built to cost what they do not hold: a few bytes declaring a 6 GiB initializer,
external data at '.' (a directory). The server refuses them with a reason naming the tensor,
spends no memory on them, and keeps serving, at startup and when poll mode finds them later."""
import os
import time

import numpy as np
import onnx.helper as oh
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto as T

import models

# The server's own footprint is well under this; the 6 GiB model used to take 6.3 GB.
MAX_RSS = 1 << 30


def _add_model(repo, name, w):
    """OUTPUT0 = INPUT0 + w, with the initializer w (a TensorProto) written as given."""
    g = oh.make_graph([oh.make_node("Add", ["INPUT0", "w"], ["OUTPUT0"])], name,
                      [oh.make_tensor_value_info("INPUT0", T.FLOAT, [4])],
                      [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, [4])], [w])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(repo, name, "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())  # onnx.save would try to load the external data


def add_no_data(repo, name):
    _add_model(repo, name, T(name="w", data_type=T.FLOAT, dims=[3, 512 << 20]))


def add_external_dot(repo, name):
    w = T(name="w", data_type=T.FLOAT, dims=[4], data_location=T.EXTERNAL)
    e = w.external_data.add()
    e.key, e.value = "location", "."
    _add_model(repo, name, w)


NO_DATA = "initializer 'w': declares float[3,536870912] (6442450944 bytes) but holds no data"
DOT = "initializer 'w': external data location '.',"


def peak_rss(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        line = next(l for l in f if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def index(c):
    return {m["name"]: m for m in c.get_model_repository_index()}


def constant(c, name):
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(np.zeros(4, np.float32))
    return c.infer(name, [inp]).as_numpy("OUTPUT0")[0]


def wait_for(check, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError("poll did not pick up the change")


def expect_refused(c, name, needle):
    m = index(c)[name]
    assert m["state"] == "UNAVAILABLE", m
    assert needle in m.get("reason", ""), m
    assert not c.is_model_ready(name)


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_hostile_models_at_startup_leave_the_server_serving(serve, tmp_path, mode):
    repo = str(tmp_path)
    add_no_data(repo, "big")
    add_external_dot(repo, "dot")
    models.add_constant(repo, "fine", [1])
    s = serve(repo, "--exit-on-error=false", f"--model-control-mode={mode}",
              "--repository-poll-secs=1")
    c = s.client()
    assert c.is_server_live() and c.is_model_ready("fine")
    expect_refused(c, "big", NO_DATA)
    expect_refused(c, "dot", DOT)
    assert "is a directory, not a regular file" in index(c)["dot"]["reason"]
    assert constant(c, "fine") == 1
    assert peak_rss(s) < MAX_RSS, f"peak RSS {peak_rss(s) >> 20} MB"
    out = s.output()
    assert NO_DATA in out and DOT in out


def test_poll_mode_keeps_serving_when_hostile_models_appear(serve, tmp_path):
    repo = str(tmp_path)
    models.add_constant(repo, "fine", [1])
    s = serve(repo, "--model-control-mode=poll", "--repository-poll-secs=1")
    c = s.client()
    assert constant(c, "fine") == 1
    add_no_data(repo, "big")
    add_external_dot(repo, "dot")  # bad_alloc in the poll thread used to end the server here
    wait_for(lambda: all(needle in index(c).get(name, {}).get("reason", "")
                         for name, needle in (("big", NO_DATA), ("dot", DOT))))
    expect_refused(c, "big", NO_DATA)
    expect_refused(c, "dot", DOT)
    models.add_constant(repo, "later", [3])  # poll goes on after them
    wait_for(lambda: c.is_model_ready("later"))
    assert c.is_server_live() and constant(c, "fine") == 1 and constant(c, "later") == 3
    assert peak_rss(s) < MAX_RSS, f"peak RSS {peak_rss(s) >> 20} MB"
