"""Several Python threads running one session at once get the right answers (the GIL is released
while Kiln runs; runs of one session are serialized inside)."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import kiln


def test_concurrent_runs_agree(mlp_model):
    sess = kiln.InferenceSession(mlp_model)
    rng = np.random.default_rng(11)
    feeds = [rng.standard_normal((1 + i % 5, 4)).astype(np.float32) for i in range(16)]
    expected = [sess.run(["p"], {"x": x})[0] for x in feeds]
    failures = []

    def worker(offset):
        try:
            for r in range(30):
                i = (offset + r) % len(feeds)
                (p,) = sess.run(["p"], {"x": feeds[i]})
                if not np.array_equal(p, expected[i]):
                    failures.append((offset, r, "wrong output"))
        except Exception as e:  # noqa: BLE001 - any failure in a thread is a test failure
            failures.append((offset, -1, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_sessions_in_threads_are_independent(mlp_model):
    results = {}

    def worker(t):
        sess = kiln.InferenceSession(mlp_model)
        x = np.full((t + 1, 4), float(t), np.float32)
        results[t] = sess.run(["y"], {"x": x})[0].shape

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {t: (t + 1, 3) for t in range(4)}


def test_conv_session_runs_on_another_thread(save_model, tmp_path):
    # A convolution first run on one thread, then on another: oneDNN 2.6's library scratchpad
    # crashed here (SIGSEGV); the CPU kernels now own their scratchpads. In a child process, so
    # that a regression fails this test instead of taking pytest down.
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    path = save_model(
        "conv1", [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    code = (
        "import threading, numpy as np, kiln\n"
        f"s = kiln.InferenceSession({path!r}); f = {{'x': np.ones((1, 3, 8, 8), np.float32)}}\n"
        "want = s.run(None, f)[0]\n"
        "got = []\n"
        "t = threading.Thread(target=lambda: got.append(s.run(None, f)[0])); t.start(); t.join()\n"
        "assert np.array_equal(got[0], want)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-500:]}"
