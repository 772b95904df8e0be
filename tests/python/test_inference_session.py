"""kiln.InferenceSession against onnxruntime on the same models: outputs, NodeArgs, dtypes,
strings, sequences, non-contiguous feeds, options and providers."""
import json
import os
import pathlib
import subprocess
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln


def ort_session(path):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def assert_same_outputs(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            assert_same_outputs(g, w, rtol, atol)
            continue
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape
        if w.dtype == object or w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_dynamic_batch_matches_onnxruntime(mlp_model):
    sess, ref = kiln.InferenceSession(mlp_model), ort_session(mlp_model)
    rng = np.random.default_rng(0)
    for batch in (1, 3, 17):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        assert_same_outputs(sess.run(None, {"x": x}), ref.run(None, {"x": x}))
    # Named outputs, in the order asked.
    x = rng.standard_normal((2, 4)).astype(np.float32)
    assert_same_outputs(sess.run(["p", "y"], {"x": x}), ref.run(["p", "y"], {"x": x}))
    assert_same_outputs(sess.run([], {"x": x}), ref.run(None, {"x": x}))


def test_node_args_match_onnxruntime(mlp_model, save_model):
    sess, ref = kiln.InferenceSession(mlp_model), ort_session(mlp_model)
    for mine, theirs in [(sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())]:
        assert [(a.name, a.type, a.shape) for a in mine] == [
            (a.name, a.type, a.shape) for a in theirs
        ]
    assert sess.get_inputs()[0].shape == ["batch", 4]
    assert sess.get_inputs()[0].dim_ranges[1] == (4, 4)
    # Unknown dims are None, unknown ranks [], other types spelled as ORT spells them.
    path = save_model(
        "kinds",
        [
            helper.make_node("Identity", ["a"], ["a2"]),
            helper.make_node("Identity", ["s"], ["s2"]),
            helper.make_node("SplitToSequence", ["a"], ["parts"]),
        ],
        [
            helper.make_tensor_value_info("a", TensorProto.INT64, [None, 2]),
            helper.make_tensor_value_info("s", TensorProto.STRING, None),
        ],
        [
            helper.make_tensor_value_info("a2", TensorProto.INT64, [None, 2]),
            helper.make_tensor_value_info("s2", TensorProto.STRING, None),
            helper.make_tensor_sequence_value_info("parts", TensorProto.INT64, None),
        ],
        check=False,
    )
    sess, ref = kiln.InferenceSession(path), ort_session(path)
    assert [(a.name, a.type, a.shape) for a in sess.get_inputs()] == [
        (a.name, a.type, a.shape) for a in ref.get_inputs()
    ]
    assert [(a.name, a.type) for a in sess.get_outputs()] == [
        (a.name, a.type) for a in ref.get_outputs()
    ]
    assert "seq(tensor(int64))" in repr(sess.get_outputs()[2])


NUMPY_TO_ONNX = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
    np.int8: TensorProto.INT8,
    np.int16: TensorProto.INT16,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
    np.uint8: TensorProto.UINT8,
    np.uint16: TensorProto.UINT16,
    np.uint32: TensorProto.UINT32,
    np.uint64: TensorProto.UINT64,
    np.bool_: TensorProto.BOOL,
}


def sample(dtype, shape, rng):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("dtype", list(NUMPY_TO_ONNX), ids=lambda d: np.dtype(d).name)
def test_every_numpy_dtype_matches_onnxruntime(dtype, save_model):
    elem = NUMPY_TO_ONNX[dtype]
    path = save_model(
        f"dtype_{np.dtype(dtype).name}",
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
            helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
            helper.make_node("Identity", ["x"], ["i"]),
        ],
        [helper.make_tensor_value_info("x", elem, ["n", 3, 2])],
        [
            helper.make_tensor_value_info("t", elem, [3, "n", 2]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n", 3, 2]),
            helper.make_tensor_value_info("i", elem, ["n", 3, 2]),
        ],
    )
    sess, ref = kiln.InferenceSession(path), ort_session(path)
    assert sess.get_inputs()[0].type == ref.get_inputs()[0].type
    rng = np.random.default_rng(1)
    x = sample(dtype, (4, 3, 2), rng)
    keep = x.copy()
    got = sess.run(None, {"x": x})
    assert_same_outputs(got, ref.run(None, {"x": x}))
    np.testing.assert_array_equal(x, keep)  # the feed is read, never written
    # Non-contiguous views: a strided slice and a transposed array.
    wide = sample(dtype, (4, 3, 4), rng)
    strided = wide[:, :, ::2]
    assert not strided.flags.c_contiguous
    assert_same_outputs(sess.run(None, {"x": strided}), ref.run(None, {"x": np.ascontiguousarray(strided)}))
    fortran = np.asfortranarray(x)
    assert_same_outputs(sess.run(None, {"x": fortran}), ref.run(None, {"x": x}))


def test_outputs_are_owned_writable_copies(save_model):
    path = save_model(
        "ident",
        [helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    sess = kiln.InferenceSession(path)
    x = np.array([1, 2, 3], np.float32)
    (y,) = sess.run(None, {"x": x})
    assert not np.shares_memory(x, y)
    y[0] = 42  # writable, and writing does not reach the feed
    assert x[0] == 1
    del x
    assert y.tolist() == [42, 2, 3]


def test_byte_swapped_and_misaligned_feeds(mlp_model):
    sess, ref = kiln.InferenceSession(mlp_model), ort_session(mlp_model)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    want = ref.run(None, {"x": x})
    assert_same_outputs(sess.run(None, {"x": x.astype(">f4")}), want)
    raw = np.zeros(x.nbytes + 1, np.uint8)
    raw[1:] = x.view(np.uint8).ravel()
    misaligned = np.frombuffer(raw, dtype=np.float32, count=x.size, offset=1).reshape(2, 4)
    assert not misaligned.flags.aligned
    assert_same_outputs(sess.run(None, {"x": misaligned}), want)


def test_string_tensors_match_onnxruntime(save_model):
    path = save_model(
        "strings",
        [
            helper.make_node("Equal", ["s", "t"], ["eq"]),
            helper.make_node("Identity", ["s"], ["s2"]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.STRING, ["n"]),
            helper.make_tensor_value_info("t", TensorProto.STRING, ["n"]),
        ],
        [
            helper.make_tensor_value_info("eq", TensorProto.BOOL, ["n"]),
            helper.make_tensor_value_info("s2", TensorProto.STRING, ["n"]),
        ],
    )
    sess, ref = kiln.InferenceSession(path), ort_session(path)
    s = np.array(["kiln", "héllo", "", "ünïcödé ✓"], dtype=object)
    t = np.array(["kiln", "hello", "", "ünïcödé ✓"], dtype=object)
    got = sess.run(None, {"s": s, "t": t})
    assert_same_outputs(got, ref.run(None, {"s": s, "t": t}))
    assert got[0].tolist() == [True, False, True, True]
    # numpy str arrays, and bytes (UTF-8) as well.
    assert_same_outputs(sess.run(None, {"s": s.astype(str), "t": t.astype(str)}), got)
    as_bytes = np.array([v.encode() for v in s], dtype=object)
    assert sess.run(["s2"], {"s": as_bytes, "t": t})[0].tolist() == s.tolist()
    # Non-contiguous string arrays.
    wide = np.array(["a", "x", "b", "y"], dtype=object)
    assert sess.run(["s2"], {"s": wide[::2], "t": wide[1::2]})[0].tolist() == ["a", "b"]


def test_sequence_outputs_and_inputs_match_onnxruntime(save_model):
    path = save_model(
        "seq",
        [
            helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0),
            helper.make_node("SequenceLength", ["items"], ["count"]),
            helper.make_node("ConcatFromSequence", ["items"], ["joined"], axis=0),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_sequence_value_info("items", TensorProto.INT64, None),
        ],
        [
            helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("count", TensorProto.INT64, []),
            helper.make_tensor_value_info("joined", TensorProto.INT64, [None]),
        ],
    )
    sess, ref = kiln.InferenceSession(path), ort_session(path)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    items = [np.array([1, 2], np.int64), np.array([3], np.int64)]
    got = sess.run(None, {"x": x, "items": items})
    assert_same_outputs(got, ref.run(None, {"x": x, "items": items}))
    assert len(got[0]) == 3 and got[1] == 2 and got[2].tolist() == [1, 2, 3]


def test_open_from_path_like_and_bytes(mlp_model):
    x = np.ones((2, 4), np.float32)
    want = ort_session(mlp_model).run(None, {"x": x})
    assert_same_outputs(kiln.InferenceSession(pathlib.Path(mlp_model)).run(None, {"x": x}), want)
    data = pathlib.Path(mlp_model).read_bytes()
    assert_same_outputs(kiln.InferenceSession(data).run(None, {"x": x}), want)


def test_session_options(mlp_model, tmp_path):
    x = np.ones((2, 4), np.float32)
    want = ort_session(mlp_model).run(None, {"x": x})
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.graph_optimization_level = kiln.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    opts.add_session_config_entry("kiln.example", 1)
    assert opts.get_session_config_entry("kiln.example") == "1"
    sess = kiln.InferenceSession(mlp_model, sess_options=opts)
    assert sess.get_session_options() is opts
    assert_same_outputs(sess.run(None, {"x": x}), want)
    ops = [e["op_type"] for e in sess.get_profile()]
    assert ops == ["MatMul", "Add", "Relu", "Softmax"]  # not optimized: every node ran
    trace = sess.end_profiling()
    events = json.loads(pathlib.Path(trace).read_text())
    assert [e["args"]["op_name"] for e in events] == ops
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    # Without profiling there is nothing to report.
    plain = kiln.InferenceSession(mlp_model)
    plain.run(None, {"x": x})
    assert plain.get_profile() == [] and plain.end_profiling() == ""


def test_providers(mlp_model):
    assert kiln.get_available_providers() == ["CPUExecutionProvider"]
    assert kiln.get_device() == "CPU"
    sess = kiln.InferenceSession(mlp_model, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    # A GPU provider this build lacks falls back to the CPU with a warning, as in ORT.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = kiln.InferenceSession(mlp_model, providers=[("CUDAExecutionProvider", {"device_id": 0})])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider is not available" in str(w.message) for w in caught)
    # A provider Kiln does not know warns and is skipped, as ORT does; the CPU runs.
    with pytest.warns(RuntimeWarning, match="unknown provider 'NoSuchExecutionProvider'"):
        sess = kiln.InferenceSession(mlp_model, providers=["NoSuchExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


@pytest.fixture
def kiln_cli():
    cli = os.environ.get("KILN_CLI")
    if not cli:
        pytest.skip("KILN_CLI (the kiln command, to compile an engine) is not set")
    return cli


def test_engines_by_path_and_bytes(mlp_model, kiln_cli, tmp_path):
    engine = tmp_path / "mlp.kiln"
    subprocess.run(
        [kiln_cli, "compile", mlp_model, "-o", str(engine), "--shape-range", "x:1..8x4"],
        check=True, capture_output=True,
    )
    x = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    want = ort_session(mlp_model).run(None, {"x": x})
    for source in (str(engine), engine.read_bytes()):
        sess = kiln.InferenceSession(source)
        assert sess.get_inputs()[0].shape == ["batch", 4]
        assert sess.get_inputs()[0].dim_ranges == [(1, 8), (4, 4)]
        assert_same_outputs(sess.run(None, {"x": x}), want)
        with pytest.raises(kiln.InvalidArgument, match="outside the declared range"):
            sess.run(None, {"x": np.zeros((9, 4), np.float32)})
