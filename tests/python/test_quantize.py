"""kiln.quantize (the compiler library's quantize_model through the Python module) against
`kiln quantize` and the C ABI's kiln_quantize (libkiln.so through ctypes): the same model,
calibration data and options give the same QDQ file, byte for byte; calibration given as arrays
works as .npz files do; the gate's scores come back as data; bad options are kiln exceptions (or
C statuses) naming what is wrong."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import kiln

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_demo_model  # noqa: E402


@pytest.fixture
def demo(tmp_path):
    path = tmp_path / "demo.onnx"
    make_demo_model.build(str(path))
    return path


def calibration(n=3):
    rng = np.random.default_rng(0)
    return [{"image": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def test_quantize_matches_the_cli_byte_for_byte(demo, tmp_path):
    cli = os.environ.get("KILN_CLI")
    if not cli:
        pytest.skip("KILN_CLI (the kiln command) is not set")
    sets = calibration()
    npz = []
    for i, s in enumerate(sets):
        npz.append(tmp_path / f"c{i}.npz")
        np.savez(npz[-1], **s)
    lines = []
    r = kiln.quantize(demo, tmp_path / "py.onnx", calibration=sets, method="percentile",
                      percentile=99.9, min_top1=0.5, log=lambda kind, text: lines.append(text))
    args = [cli, "quantize", str(demo), "-o", str(tmp_path / "cli.onnx"), "--method",
            "percentile", "--percentile", "99.9", "--min-top1", "0.5"]
    for p in npz:
        args += ["--calibration-npz", str(p)]
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "py.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()
    lib_path = os.environ.get("KILN_LIBRARY") or os.path.join(os.path.dirname(cli), "capi",
                                                              "libkiln.so")
    if os.path.exists(lib_path):
        lib = ctypes.CDLL(lib_path)
        p = ctypes.c_void_p
        lib.kiln_quantize_options_create.argtypes = [ctypes.POINTER(p)]
        lib.kiln_quantize_options_set_config.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p]
        lib.kiln_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.POINTER(p)]
        lib.kiln_quantize_result_gate.argtypes = [p, ctypes.POINTER(ctypes.c_int),
                                                  ctypes.POINTER(ctypes.c_char_p),
                                                  ctypes.POINTER(ctypes.c_size_t)]
        lib.kiln_quantize_result_destroy.argtypes = [p]
        lib.kiln_quantize_options_destroy.argtypes = [p]
        lib.kiln_last_error_message.restype = ctypes.c_char_p
        opts = p()
        assert lib.kiln_quantize_options_create(ctypes.byref(opts)) == 0
        for key, value in [("method", "percentile"), ("percentile", "99.9"), ("min_top1", "0.5")] + \
                [("calibration_npz", str(n)) for n in npz]:
            assert lib.kiln_quantize_options_set_config(opts, key.encode(), value.encode()) == 0
        assert lib.kiln_quantize_options_set_config(opts, b"metod", b"minmax") != 0
        assert b"did you mean 'method'" in lib.kiln_last_error_message()
        result = p()
        status = lib.kiln_quantize(str(demo).encode(), str(tmp_path / "c.onnx").encode(), opts,
                                   ctypes.byref(result))
        assert status == 0, lib.kiln_last_error_message()
        passed, failure, nodes = ctypes.c_int(), ctypes.c_char_p(), ctypes.c_size_t()
        assert lib.kiln_quantize_result_gate(result, ctypes.byref(passed), ctypes.byref(failure),
                                             ctypes.byref(nodes)) == 0
        assert passed.value == 1 and nodes.value == r.quantized_nodes
        lib.kiln_quantize_result_destroy(result)
        lib.kiln_quantize_options_destroy(opts)
        assert (tmp_path / "c.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()
    assert r.passed and r.quantized_nodes > 0 and r.calibration_sets == 3
    assert r.int8_weight_bytes * 4 == r.float_weight_bytes
    [probs] = [o for o in r.outputs if o.name == "probs"]
    assert probs.cosine > 0.99 and probs.top1 is not None and 0.5 <= probs.top1 <= 1
    assert r.worst_nodes and all(0 < c <= 1 for _, c in r.worst_nodes)
    assert "".join(lines) == r.report and "quantize gate: output 'probs'" in r.report
    q = onnx.load(str(tmp_path / "py.onnx"))
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)


def test_quantize_gate_and_option_errors(demo, tmp_path):
    with pytest.raises(kiln.InvalidArgument, match="has cosine below 1"):
        kiln.quantize(demo, tmp_path / "q.onnx", calibration=calibration(1), min_cosine=1.0)
    assert not (tmp_path / "q.onnx").exists()
    r = kiln.quantize(demo, tmp_path / "q.onnx", calibration=calibration(1), min_cosine=1.0,
                      allow_drift=True)
    assert not r.passed and "cosine below" in r.failure and (tmp_path / "q.onnx").exists()
    with pytest.raises(kiln.InvalidArgument, match="method is 'minmax', 'percentile' or 'entropy'"):
        kiln.quantize(demo, tmp_path / "q.onnx", method="kl")
    (tmp_path / "bad.cache").write_bytes(b"KILNCAL\0garbage")
    with pytest.raises(kiln.InvalidArgument, match="bad.cache' is malformed"):
        kiln.quantize(demo, tmp_path / "q.onnx", calibration=calibration(1),
                      calibration_cache=tmp_path / "bad.cache")
    with pytest.raises(TypeError, match="calibration_cache is a path"):
        kiln.quantize(demo, tmp_path / "q.onnx", calibration_cache=3)
    with pytest.raises(kiln.InvalidArgument, match="min_top1 must be a number in"):
        kiln.quantize(demo, tmp_path / "q.onnx", min_top1=2)
    with pytest.raises(kiln.InvalidArgument, match="max_collapsed must be a number in"):
        kiln.quantize(demo, tmp_path / "q.onnx", max_collapsed=1.5)
    # 1 turns the trap off: no node is kept float32 for it (tests/cli/test_quantize.py has one
    # that is).
    r = kiln.quantize(demo, tmp_path / "q.onnx", calibration=calibration(1), max_collapsed=1)
    assert r.collapsed == [] and r.quantized_nodes > 0
    with pytest.raises(TypeError, match="model is a path"):
        kiln.quantize(b"bytes", tmp_path / "q.onnx")


def test_quantize_entropy_and_the_calibration_cache(demo, tmp_path):
    """method="entropy" with a calibration cache: the second call reads the cache and writes the
    same file; the CLI and the C ABI read the cache the Python call wrote and write it too."""
    sets = calibration()
    npz = []
    for i, s in enumerate(sets):
        npz.append(tmp_path / f"c{i}.npz")
        np.savez(npz[-1], **s)
    cache = tmp_path / "demo.cache"
    first = kiln.quantize(demo, tmp_path / "a.onnx", calibration=sets, method="entropy",
                          calibration_cache=cache)
    assert not first.calibration_cached and cache.exists()
    assert "calibrated (entropy) on 3 input sets" in first.report
    second = kiln.quantize(demo, tmp_path / "b.onnx", calibration=sets, method="entropy",
                           calibration_cache=cache)
    assert second.calibration_cached and "calibration read from the cache" in second.report
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    cli = os.environ.get("KILN_CLI")
    if not cli:
        return
    args = [cli, "quantize", str(demo), "-o", str(tmp_path / "cli.onnx"), "--method", "entropy",
            "--calibration-cache", str(cache)]
    for p in npz:
        args += ["--calibration-npz", str(p)]
    r = subprocess.run(args, check=True, capture_output=True, text=True)
    assert "calibration read from the cache" in r.stdout
    assert (tmp_path / "cli.onnx").read_bytes() == (tmp_path / "a.onnx").read_bytes()
    lib_path = os.environ.get("KILN_LIBRARY") or os.path.join(os.path.dirname(cli), "capi",
                                                              "libkiln.so")
    if not os.path.exists(lib_path):
        return
    lib = ctypes.CDLL(lib_path)
    p = ctypes.c_void_p
    lib.kiln_quantize_options_create.argtypes = [ctypes.POINTER(p)]
    lib.kiln_quantize_options_set_config.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p]
    lib.kiln_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.POINTER(p)]
    lib.kiln_quantize_result_report.argtypes = [p, ctypes.POINTER(ctypes.c_char_p)]
    lib.kiln_quantize_result_destroy.argtypes = [p]
    lib.kiln_quantize_options_destroy.argtypes = [p]
    lib.kiln_last_error_message.restype = ctypes.c_char_p
    opts = p()
    assert lib.kiln_quantize_options_create(ctypes.byref(opts)) == 0
    for key, value in [("method", "entropy"), ("calibration_cache", str(cache))] + \
            [("calibration_npz", str(n)) for n in npz]:
        assert lib.kiln_quantize_options_set_config(opts, key.encode(), value.encode()) == 0
    result = p()
    assert lib.kiln_quantize(str(demo).encode(), str(tmp_path / "c.onnx").encode(), opts,
                             ctypes.byref(result)) == 0, lib.kiln_last_error_message()
    text = ctypes.c_char_p()
    assert lib.kiln_quantize_result_report(result, ctypes.byref(text)) == 0
    assert b"calibration read from the cache" in text.value
    lib.kiln_quantize_result_destroy(result)
    lib.kiln_quantize_options_destroy(opts)
    assert (tmp_path / "c.onnx").read_bytes() == (tmp_path / "a.onnx").read_bytes()


def test_quantize_task_metric_max_drop_and_sensitivity(demo, tmp_path):
    """metric="top1" with max_drop: the scores come back as data, and the sensitivity report
    (each node quantized alone) names every quantized node, most sensitive first."""
    import json
    report = tmp_path / "sens.json"
    r = kiln.quantize(demo, tmp_path / "q.onnx", calibration=calibration(), metric="top1",
                      max_drop=0.5, sensitivity_report=report)
    assert r.passed and r.metric_reference == 1.0
    assert r.metric_drop == pytest.approx(1.0 - r.metric_score)
    assert len(r.sensitivity) == r.quantized_nodes
    drops = [d for _, d in r.sensitivity]
    assert drops == sorted(drops, reverse=True) and all(0 <= d <= 1 for d in drops)
    sens = json.loads(report.read_text())
    assert [(n["node"], n["drop"]) for n in sens["nodes"]] == \
        [(n, pytest.approx(d)) for n, d in r.sensitivity]
    plain = kiln.quantize(demo, tmp_path / "p.onnx", calibration=calibration())
    assert plain.metric_drop is None and plain.sensitivity == []
    with pytest.raises(kiln.InvalidArgument, match="choose cosine, top1, max-abs-steps"):
        kiln.quantize(demo, tmp_path / "q.onnx", metric="accuracy")
    with pytest.raises(kiln.InvalidArgument, match="max_drop must be a number >= 0"):
        kiln.quantize(demo, tmp_path / "q.onnx", max_drop=-1)


def transformer(tmp_path):
    import make_transformer_model
    path = tmp_path / "enc.onnx"
    make_transformer_model.build(str(path), layers=1, hidden=64, heads=4)
    return path


def test_quantize_int4_matches_the_cli_and_the_c_abi(tmp_path):
    """int4=True (MatMulNBits): the same file from Python, the CLI and the C ABI; sizes and the
    GPTQ count come back as data."""
    model = transformer(tmp_path)
    rng = np.random.default_rng(2)
    sets = [{"x": rng.standard_normal((2, 8, 64)).astype(np.float32),
             "mask": np.zeros((2, 1, 1, 8), np.float32)} for _ in range(2)]
    r = kiln.quantize(model, tmp_path / "py.onnx", calibration=sets, int4=True, block_size=64,
                      symmetric=True, int4_method="gptq", min_cosine=0.5)
    assert r.passed and r.quantized_nodes == 6 and r.weights == 6 and r.gptq_weights == 6
    assert r.activations == 0 and r.int8_weight_bytes == 0
    # Half a byte a weight plus a float scale per 64 (symmetric: no zero points), against 4.
    assert r.int4_weight_bytes * 64 == r.float_weight_bytes * 9
    assert "block 64, symmetric, GPTQ (6 of them)" in r.report
    q = onnx.load(str(tmp_path / "py.onnx"))
    assert sum(n.op_type == "MatMulNBits" for n in q.graph.node) == 6
    cli = os.environ.get("KILN_CLI")
    if not cli:
        pytest.skip("KILN_CLI (the kiln command) is not set")
    npz = []
    for i, s in enumerate(sets):
        npz.append(tmp_path / f"c{i}.npz")
        np.savez(npz[-1], **s)
    args = [cli, "quantize", str(model), "-o", str(tmp_path / "cli.onnx"), "--int4",
            "--block-size", "64", "--symmetric", "--int4-method", "gptq", "--min-cosine", "0.5"]
    for p in npz:
        args += ["--calibration-npz", str(p)]
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "py.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()
    lib_path = os.environ.get("KILN_LIBRARY") or os.path.join(os.path.dirname(cli), "capi",
                                                              "libkiln.so")
    if not os.path.exists(lib_path):
        return
    lib = ctypes.CDLL(lib_path)
    p = ctypes.c_void_p
    lib.kiln_quantize_options_create.argtypes = [ctypes.POINTER(p)]
    lib.kiln_quantize_options_set_config.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p]
    lib.kiln_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.POINTER(p)]
    lib.kiln_quantize_result_destroy.argtypes = [p]
    lib.kiln_quantize_options_destroy.argtypes = [p]
    lib.kiln_last_error_message.restype = ctypes.c_char_p
    opts = p()
    assert lib.kiln_quantize_options_create(ctypes.byref(opts)) == 0
    for key, value in [("int4", "1"), ("block_size", "64"), ("symmetric", "1"),
                       ("int4_method", "gptq"), ("min_cosine", "0.5")] + \
            [("calibration_npz", str(n)) for n in npz]:
        assert lib.kiln_quantize_options_set_config(opts, key.encode(), value.encode()) == 0
    assert lib.kiln_quantize_options_set_config(opts, b"block_size", b"48") != 0
    assert b"'block_size' takes 16, 32, 64, 128 or 256" in lib.kiln_last_error_message()
    result = p()
    assert lib.kiln_quantize(str(model).encode(), str(tmp_path / "c.onnx").encode(), opts,
                             ctypes.byref(result)) == 0, lib.kiln_last_error_message()
    lib.kiln_quantize_result_destroy(result)
    lib.kiln_quantize_options_destroy(opts)
    assert (tmp_path / "c.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()


def test_quantize_int4_option_errors(tmp_path):
    model = transformer(tmp_path)
    with pytest.raises(kiln.InvalidArgument, match="block_size must be 16, 32, 64, 128 or 256"):
        kiln.quantize(model, tmp_path / "q.onnx", int4=True, block_size=48)
    with pytest.raises(kiln.InvalidArgument, match="int4_method is 'rtn' or 'gptq'"):
        kiln.quantize(model, tmp_path / "q.onnx", int4=True, int4_method="awq")
    with pytest.raises(kiln.InvalidArgument, match="gptq_damp must be a number in"):
        kiln.quantize(model, tmp_path / "q.onnx", int4=True, gptq_damp=0)
    with pytest.raises(kiln.InvalidArgument, match="--int4 .* and --dynamic are two modes"):
        kiln.quantize(model, tmp_path / "q.onnx", int4=True, dynamic=True)


def residual_model(path):
    """Two residual blocks on [1, 8, 8, 8]: one adding its input (identity skip), one adding a
    downsampling 1x1 convolution's result (both Add inputs are convolution results)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def conv(x, cin, cout, name, relu=True, k=3):
        w = numpy_helper.from_array(
            (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32), name + "_w")
        b = numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32),
                                    name + "_b")
        inits.extend([w, b])
        nodes.append(helper.make_node("Conv", [x, w.name, b.name], [name], pads=[k // 2] * 4))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
        return name + "_r"

    stem = conv("x", 3, 8, "stem")
    a = conv(conv(stem, 8, 8, "b1c1"), 8, 8, "b1c2", relu=False)
    nodes.append(helper.make_node("Add", [a, stem], ["b1"]))
    nodes.append(helper.make_node("Relu", ["b1"], ["b1r"]))
    c = conv(conv("b1r", 8, 16, "b2c1"), 16, 16, "b2c2", relu=False)
    d = conv("b1r", 8, 16, "b2down", relu=False, k=1)
    nodes.append(helper.make_node("Add", [c, d], ["b2"]))
    nodes.append(helper.make_node("Relu", ["b2"], ["y"]))
    graph = helper.make_graph(nodes, "residual",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("quantized_residuals", [True, False])
def test_residual_skips_read_quantized(tmp_path, quantized_residuals):
    src, out = tmp_path / "res.onnx", tmp_path / "res.int8.onnx"
    residual_model(str(src))
    sets = [{"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)}
            for i in range(3)]
    r = kiln.quantize(src, out, calibration=sets, quantized_residuals=quantized_residuals)
    m = onnx.load(str(out))
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    skips = [producer.get(n.input[1]) for n in m.graph.node if n.op_type == "Add"]
    if quantized_residuals:
        # The identity skip reuses the DequantizeLinear the next convolution reads; the
        # downsampling convolution's result gets a pair of its own.
        assert r.quantized_residuals == 2 and skips == ["DequantizeLinear"] * 2, skips
    else:
        assert r.quantized_residuals == 0 and "DequantizeLinear" not in skips, skips
    # Kiln runs it with the Adds inside the int8 convolutions, close to the float model.
    s = kiln.InferenceSession(str(out))
    got = s.run(None, sets[0])[0]
    want = kiln.InferenceSession(str(src)).run(None, sets[0])[0]
    cos = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.99, cos


def test_max_pool_of_a_quantized_activation_reads_it_quantized(tmp_path):
    # An Inception block: r feeds a convolution branch and a max-pool branch, joined by Concat.
    # The quantizer has r read quantized by the convolution; the MaxPool reads the same
    # DequantizeLinear (as onnxruntime's quantizer writes it), so the Concat's single reader is a
    # QuantizeLinear and the engine joins uint8 (passes/fuse_quantized_ops).
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    def w(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)
    nodes = [
        helper.make_node("Conv", ["image", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r"]),
        helper.make_node("Conv", ["r", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w2"], ["c2"]),
        helper.make_node("Concat", ["c1", "c2"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w3"], ["y"]),
    ]
    g = helper.make_graph(nodes, "block",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])],
                          [w("w0", (8, 3, 3, 3)), w("w1", (6, 8, 3, 3)), w("w2", (6, 8, 1, 1)),
                           w("w3", (4, 12, 1, 1))])
    src, dst = tmp_path / "block.onnx", tmp_path / "block_int8.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    kiln.quantize(src, dst, calibration=calibration())
    m = onnx.load(dst)
    producer = {o: n for n in m.graph.node for o in n.output}
    pool = next(n for n in m.graph.node if n.op_type == "MaxPool")
    assert producer[pool.input[0]].op_type == "DequantizeLinear"
    readers = [n for n in m.graph.node if "cat" in n.input]
    assert [n.op_type for n in readers] == ["QuantizeLinear"], readers
    opts = kiln.SessionOptions()
    opts.enable_profiling = True
    s = kiln.InferenceSession(str(dst), opts)
    x = calibration(1)[0]["image"]
    got = s.run(None, {"image": x})[0]
    ops = [e["op_type"] for e in s.get_profile()]
    assert "Concat" in ops and ops.count("FusedQLinearConv") == 4, ops
    # onnxruntime on the same file: within a few of the output's quantization steps.
    import onnxruntime as ort
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
