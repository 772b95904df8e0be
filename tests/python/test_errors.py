"""Bad input of every kind raises a Kiln exception (or the Python one ORT users expect) with a
message naming what is wrong, and the session keeps working."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln


def test_exception_hierarchy():
    assert issubclass(kiln.InvalidArgument, kiln.KilnError)
    assert issubclass(kiln.InvalidArgument, ValueError)
    assert issubclass(kiln.NotFound, LookupError)
    assert issubclass(kiln.Unsupported, NotImplementedError)
    assert issubclass(kiln.KilnError, RuntimeError)
    for cls in (kiln.Unavailable, kiln.Internal):
        assert issubclass(cls, kiln.KilnError)


def test_open_errors(tmp_path):
    with pytest.raises(kiln.NotFound, match="missing.onnx"):
        kiln.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(kiln.KilnError):
        kiln.InferenceSession(b"definitely not a model")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(kiln.KilnError):
        kiln.InferenceSession(str(garbage))
    with pytest.raises(TypeError):
        kiln.InferenceSession(42)
    with pytest.raises(TypeError):
        kiln.InferenceSession("m.onnx", sess_options={"threads": 1})


def test_bad_options(mlp_model):
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = -1
    with pytest.raises(kiln.InvalidArgument, match="intra_op_num_threads"):
        kiln.InferenceSession(mlp_model, sess_options=opts)
    with pytest.raises(KeyError):
        kiln.SessionOptions().get_session_config_entry("nope")


def test_bad_feeds_and_names(mlp_model):
    sess = kiln.InferenceSession(mlp_model)
    x = np.ones((2, 4), np.float32)
    with pytest.raises(kiln.InvalidArgument, match="input 'x': expected element type float, got double"):
        sess.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(ValueError, match="input 'x': expected shape"):
        sess.run(None, {"x": np.ones((2, 5), np.float32)})
    with pytest.raises(kiln.InvalidArgument, match="input 'x': expected shape"):
        sess.run(None, {"x": np.ones(4, np.float32)})
    with pytest.raises(kiln.InvalidArgument, match="no input named 'bogus'"):
        sess.run(None, {"x": x, "bogus": x})
    with pytest.raises(kiln.InvalidArgument, match="'x' was not given"):
        sess.run(None, {})
    with pytest.raises(kiln.NotFound, match="no output named 'nope'"):
        sess.run(["nope"], {"x": x})
    with pytest.raises(kiln.InvalidArgument, match="input 'x' is None"):
        sess.run(None, {"x": None})
    with pytest.raises(kiln.Unsupported, match="complex128"):
        sess.run(None, {"x": x.astype(np.complex128)})
    with pytest.raises(kiln.InvalidArgument, match="a string tensor holds str or bytes"):
        sess.run(None, {"x": np.array([1, "a"], dtype=object)})
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        sess.run(None, [("x", x)])
    with pytest.raises(TypeError, match="output names are strings"):
        sess.run([0], {"x": x})
    with pytest.raises(TypeError, match="run_options"):
        sess.run(None, {"x": x}, run_options="fast")
    # Still healthy, and RunOptions are accepted.
    (y, p) = sess.run(None, {"x": x}, run_options=kiln.RunOptions())
    np.testing.assert_allclose(p.sum(axis=1), [1, 1], rtol=1e-6)


def test_sequence_input_needs_a_list(save_model):
    path = save_model(
        "seqlen",
        [helper.make_node("SequenceLength", ["items"], ["count"])],
        [helper.make_tensor_sequence_value_info("items", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("count", TensorProto.INT64, [])],
    )
    sess = kiln.InferenceSession(path)
    with pytest.raises(kiln.InvalidArgument, match="is a sequence"):
        sess.run(None, {"items": np.ones(3, np.float32)})
    assert sess.run(None, {"items": [np.ones(3, np.float32)] * 4})[0] == 4


def test_unavailable_device_is_refused_when_cpu_is_not_an_option(mlp_model, monkeypatch):
    # With the CPU fallback removed, a GPU provider's failure is the error the user sees.
    from kiln import session

    monkeypatch.setattr(session, "_CPU", "CUDAExecutionProvider")
    # This machine has no GPU (CI never does): the registry knows the device, the loader says why.
    with pytest.raises(kiln.Unavailable, match="device 'gpu' is not available: "):
        kiln.InferenceSession(mlp_model, providers=["CUDAExecutionProvider"])
