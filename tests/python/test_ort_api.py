"""onnxruntime's InferenceSession API beyond run() (issue 13 item 11): get_modelmeta, OrtValue,
io_binding / run_with_iobinding, run_async, set_providers and fallback, list feeds, and the
ORT-named error classes. Each is checked against run()'s results or the error it must raise."""
import threading
import time
import warnings

import numpy as np
import onnx
import pytest

import kiln


@pytest.fixture
def sess(mlp_model):
    return kiln.InferenceSession(mlp_model)


@pytest.fixture
def x():
    return np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)


def test_modelmeta(mlp_model, tmp_path):
    model = onnx.load(mlp_model)
    model.producer_name = "unit-test"
    model.domain = "org.kiln.test"
    model.doc_string = "a tiny MLP"
    model.model_version = 7
    onnx.helper.set_model_props(model, {"author": "kiln", "license": "MIT"})
    path = tmp_path / "meta.onnx"
    onnx.save(model, str(path))
    meta = kiln.InferenceSession(str(path)).get_modelmeta()
    assert meta.producer_name == "unit-test"
    assert meta.graph_name == "mlp"
    assert meta.domain == "org.kiln.test"
    assert meta.description == "a tiny MLP"
    assert meta.version == 7
    assert meta.custom_metadata_map == {"author": "kiln", "license": "MIT"}


def test_ortvalue(sess, x):
    v = kiln.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
    assert v.shape() == [2, 4] and v.data_type() == "tensor(float)"
    assert v.device_name() == "cpu" and v.is_tensor() and v.element_type() is np.float32
    np.testing.assert_array_equal(v.numpy(), x)
    assert v.data_ptr() == x.ctypes.data  # kept, not copied, as ORT does on the CPU
    expected = sess.run(None, {"x": x})
    for got, want in zip(sess.run(None, {"x": v}), expected):
        np.testing.assert_array_equal(got, want)
    assert kiln.OrtValue.ortvalue_from_numpy(np.array(["a", "b"])).data_type() == "tensor(string)"
    with pytest.raises(kiln.NotImplemented, match="device_type 'cuda' is not supported"):
        kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    with pytest.raises(kiln.Unsupported):  # also the class Kiln raised before
        kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)


def test_iobinding_numpy_and_allocated_outputs(sess, x):
    y, p = sess.run(None, {"x": x})
    b = sess.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_output("p")
    b.bind_output("y", "cpu")
    b.synchronize_inputs()
    sess.run_with_iobinding(b)
    b.synchronize_outputs()
    got_p, got_y = b.copy_outputs_to_cpu()
    np.testing.assert_array_equal(got_p, p)
    np.testing.assert_array_equal(got_y, y)
    outs = b.get_outputs()
    assert [o.shape() for o in outs] == [[2, 3], [2, 3]]
    np.testing.assert_array_equal(outs[1].numpy(), y)
    b.clear_binding_outputs()
    assert b.get_outputs() == []
    with pytest.raises(kiln.InvalidArgument, match="bind at least one output"):
        sess.run_with_iobinding(b)
    b.clear_binding_inputs()
    b.bind_output("y")
    with pytest.raises(kiln.InvalidArgument):  # the input is no longer bound
        sess.run_with_iobinding(b)


def test_iobinding_pointers_and_ortvalues(sess, x):
    y, p = sess.run(None, {"x": x})
    b = sess.io_binding()
    b.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    out = np.zeros((2, 3), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, [2, 3], out.ctypes.data)
    pv = kiln.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    b.bind_ortvalue_output("p", pv)
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(out, y)  # written into the bound memory
    np.testing.assert_array_equal(pv.numpy(), p)
    # Bound memory is read at each run: change the input in place and run again.
    x2 = x * 2
    x[...] = x2
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(out, sess.run(["y"], {"x": x2})[0])
    # An OrtValue input and a wrongly shaped output buffer.
    b.bind_ortvalue_input("x", kiln.OrtValue.ortvalue_from_numpy(np.ones((3, 4), np.float32)))
    with pytest.raises(kiln.InvalidArgument, match="output 'y' is float32\\[3, 3\\] but the memory"):
        sess.run_with_iobinding(b)


def test_iobinding_refuses_devices_and_names(sess, x):
    b = sess.io_binding()
    with pytest.raises(kiln.NotImplemented, match="device_type 'cuda' is not supported"):
        b.bind_input("x", "cuda", 0, np.float32, [2, 4], x.ctypes.data)
    with pytest.raises(kiln.NotImplemented, match="device_type 'cuda'"):
        b.bind_output("y", "cuda")
    with pytest.raises(kiln.InvalidArgument, match="no input named 'z'"):
        b.bind_cpu_input("z", x)
    with pytest.raises(kiln.InvalidArgument, match="no output named 'q'"):
        b.bind_output("q")
    with pytest.raises(TypeError):
        kiln.InferenceSession.run_with_iobinding(sess, object())


def test_run_async(sess, x):
    expected = sess.run(None, {"x": x})
    done = threading.Event()
    got = {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err,
                   thread=threading.current_thread())
        done.set()

    sess.run_async(None, {"x": x}, callback, "state")
    assert done.wait(30)
    assert got["err"] == "" and got["user_data"] == "state"
    assert got["thread"] is not threading.main_thread()
    for a, b in zip(got["results"], expected):
        np.testing.assert_array_equal(a, b)
    done.clear()
    sess.run_async(None, {"x": np.ones((2, 5), np.float32)}, callback, 42)
    assert done.wait(30)
    assert got["results"] is None and got["user_data"] == 42
    assert "InvalidArgument" in got["err"] and "input 'x'" in got["err"]


def test_run_async_queue_is_bounded(sess, x):
    # The worker is held until the test releases it: the queue fills up, then refuses.
    gate = threading.Event()
    done = []

    def slow(results, user_data, err):
        gate.wait(30)
        done.append(err)

    limit = kiln.session._RUN_ASYNC_PENDING_LIMIT
    for _ in range(limit):
        sess.run_async(None, {"x": x}, slow, None)
    with pytest.raises(kiln.RuntimeException, match="calls are already pending"):
        sess.run_async(None, {"x": x}, slow, None)
    gate.set()
    deadline = time.time() + 60
    while len(done) < limit and time.time() < deadline:
        time.sleep(0.01)
    assert done == [""] * limit
    # Slots come back: one more is accepted.
    finished = threading.Event()
    sess.run_async(None, {"x": x}, lambda r, u, e: finished.set(), None)
    assert finished.wait(30)


def test_set_providers_and_fallback(sess, x):
    expected = sess.run(None, {"x": x})
    sess.set_providers(["CPUExecutionProvider"], [{}])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(RuntimeWarning, match="unknown provider 'FooExecutionProvider'"):
        sess.set_providers(["FooExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess.set_providers(["CUDAExecutionProvider"])  # this build has no GPU: the CPU runs
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider is not available" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="one dict per provider"):
        sess.set_providers(["CPUExecutionProvider"], [{}, {}])
    for a, b in zip(sess.run(None, {"x": x}), expected):
        np.testing.assert_array_equal(a, b)


class _FailingNative:
    """A native session whose runs fail as a device's would (Unavailable)."""

    def run(self, names, feeds):
        raise kiln.Unavailable("device 'gpu' lost")


def test_fallback_retries_on_cpu(sess, x):
    expected = sess.run(None, {"x": x})
    sess._sess, sess._provider = _FailingNative(), "CUDAExecutionProvider"
    with pytest.warns(RuntimeWarning, match="falling back to CPUExecutionProvider"):
        got = sess.run(None, {"x": x})
    assert sess.get_providers() == ["CPUExecutionProvider"]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    sess.disable_fallback()
    sess._sess, sess._provider = _FailingNative(), "CUDAExecutionProvider"
    with pytest.raises(kiln.RuntimeException, match="device 'gpu' lost"):
        sess.run(None, {"x": x})
    sess.enable_fallback()
    with pytest.warns(RuntimeWarning):
        sess.run(None, {"x": x})


def test_list_feeds_cast_to_input_type(sess, x):
    expected = sess.run(None, {"x": x})
    got = sess.run(None, {"x": x.tolist()})  # Python floats: float64 without the cast
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    ints = sess.run(None, {"x": [[1, 2, 3, 4]]})  # ints cast to float, as numpy would
    np.testing.assert_array_equal(ints[0], sess.run(["y"], {"x": np.array([[1, 2, 3, 4]], np.float32)})[0])
    with pytest.raises(kiln.InvalidArgument, match="input 'x': cannot make a tensor\\(float\\)"):
        sess.run(None, {"x": [["a", "b", "c", "d"]]})
    with pytest.raises(ValueError):  # an ndarray of another dtype is still refused, not cast
        sess.run(None, {"x": x.astype(np.float64)})


def test_ort_error_classes(mlp_model, tmp_path, sess, x):
    for name in ("Fail", "InvalidArgument", "NoSuchFile", "InvalidGraph", "RuntimeException",
                 "NotImplemented"):
        assert issubclass(getattr(kiln, name), kiln.KilnError)
    missing = tmp_path / "missing.onnx"
    with pytest.raises(kiln.NoSuchFile, match="missing.onnx") as e:
        kiln.InferenceSession(str(missing))
    assert isinstance(e.value, kiln.NotFound)  # what Kiln raised before still catches it
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model")
    with pytest.raises(kiln.InvalidGraph) as e:
        kiln.InferenceSession(str(bad))
    assert isinstance(e.value, kiln.InvalidArgument)
    with pytest.raises(kiln.InvalidArgument) as e:
        sess.run(["nope"], {"x": x})
    assert isinstance(e.value, kiln.NotFound)
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        sess.run(None, {"x": np.ones((2, 5), np.float32)})


def test_free_dimension_override(mlp_model, x):
    so = kiln.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 2)
    sess = kiln.InferenceSession(mlp_model, so)
    assert sess.get_inputs()[0].shape == [2, 4]
    assert [o.shape for o in sess.get_outputs()] == [[2, 3], [2, 3]]
    plain = kiln.InferenceSession(mlp_model)
    for a, b in zip(sess.run(None, {"x": x}), plain.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(kiln.InvalidArgument, match="dim 0 \\('batch'\\) is 3, but"):
        sess.run(None, {"x": np.ones((3, 4), np.float32)})
    so = kiln.SessionOptions()
    so.add_free_dimension_override_by_name("btach", 2)
    with pytest.warns(RuntimeWarning, match="no input or output of this model has a dim"):
        kiln.InferenceSession(mlp_model, so)
    with pytest.raises(TypeError):
        so.add_free_dimension_override_by_name("batch", -1)
