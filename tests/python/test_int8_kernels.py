"""Static INT8 QDQ models on the CPU's int8 kernels (passes/fuse_quantized_ops, the oneDNN int8
convolution and matmul): each small QDQ model (tools/make_qdq_models.py) runs optimized (the
int8 nodes) and unoptimized (the reference path: DequantizeLinear, the float op, QuantizeLinear),
and the two agree within one quantization step of the output (rounding), or to float rounding
where the output stays float32; onnxruntime runs the same files within the same bounds. The
optimized graph must hold the int8 nodes (the pass fired); weight zero points (uint8 weights over
0..255 among them) run on them too."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_qdq_models as qdq  # noqa: E402


def session(path, optimize=True, threads=1):
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    if not optimize:
        opts.graph_optimization_level = kiln.GraphOptimizationLevel.ORT_DISABLE_ALL
    return kiln.InferenceSession(path, opts)


def run(sess, x):
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def op_types(sess):
    return sorted({e["op_type"] for e in sess.get_profile()})


def output_step(path):
    """The scale of the QuantizeLinear before the graph output's DequantizeLinear (None when the
    output is float32 straight from the op)."""
    m = onnx.load(path)
    out = m.graph.output[0].name
    producer = {o: n for n in m.graph.node for o in n.output}
    last = producer[out]
    if last.op_type != "DequantizeLinear":
        return None
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return float(inits[last.input[1]])


def inputs(shape, seed=1, lo=-1.5, hi=3.5):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def check_against_reference(path, shape, fused_op, seed=1):
    fast, ref = session(path), session(path, optimize=False)
    x = inputs(shape, seed)
    got, want = run(fast, x), run(ref, x)
    assert got.shape == want.shape
    step = output_step(path)
    if step is None:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    else:
        diff = np.abs(got - want)
        assert diff.max() <= step * 1.001, (diff.max(), step)
        # Rounding differences only: nearly every value is exact.
        assert (diff > step * 0.5).mean() < 0.02
    ops = op_types(fast)
    if fused_op:
        assert fused_op in ops, ops
        assert not {"Conv", "MatMul", "Gemm", "FusedConv", "FusedMatMul", "FusedGemm"} & set(ops)
    # onnxruntime on the same file: the same bound against Kiln's reference path.
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = o.run(None, {o.get_inputs()[0].name: x})[0]
    bound = step * 1.001 if step else 1e-3 * np.abs(want).max()
    assert np.abs(theirs - want).max() <= bound
    return got, want


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("quantized_output", [True, False])
def test_conv(tmp_path, act, quantized_output):
    path = qdq.conv(tmp_path / "conv.onnx", act=act, quantized_output=quantized_output)
    check_against_reference(path, [2, 8, 10, 10], "FusedQLinearConv")


@pytest.mark.parametrize("case", [
    dict(group=4, c=8, m=8),                       # grouped
    dict(group=16, c=16, m=16, act="clip"),        # depthwise
    dict(group=16, c=16, m=16, stride=2, hw=11),   # depthwise, strided, odd size
    dict(per_channel=False),                       # per-tensor weights
    dict(k=1, pad=0, bias=False),                  # pointwise, no bias
    dict(x_dtype=np.int8),                         # int8 activations
    dict(k=5, pad=2, stride=2, hw=13),             # padding read as the zero point
])
def test_conv_variants(tmp_path, case):
    path = qdq.conv(tmp_path / "conv.onnx", **case)
    c = case.get("c", 8)
    hw = case.get("hw", 10)
    check_against_reference(path, [2, c, hw, hw], "FusedQLinearConv")


def test_chain_keeps_uint8_between_int8_nodes(tmp_path):
    path = qdq.chain(tmp_path / "chain.onnx")
    check_against_reference(path, [1, 3, 12, 12], "FusedQLinearConv")
    fast = session(path)
    run(fast, inputs([1, 3, 12, 12]))
    ops = op_types(fast)
    # The Q -> DQ pairs between the convolutions are gone: only the input's QuantizeLinear
    # remains (the int8 nodes write and read uint8 themselves).
    assert [e["op_type"] for e in fast.get_profile()].count("QuantizeLinear") == 1, ops
    assert "DequantizeLinear" not in ops, ops


@pytest.mark.parametrize("relu", [True, False])
def test_residual_add_joins_the_int8_convolution(tmp_path, relu):
    path = qdq.residual(tmp_path / "residual.onnx", relu=relu)
    check_against_reference(path, [1, 8, 10, 10], "FusedQLinearConv")
    fast = session(path)
    run(fast, inputs([1, 8, 10, 10]))
    ops = [e["op_type"] for e in fast.get_profile()]
    # The float32 residual goes into the second convolution (oneDNN's sum post-op).
    assert "Add" not in ops and "Relu" not in ops, ops


@pytest.mark.parametrize("relu", [True, False])
def test_uint8_residual_joins_the_int8_convolution(tmp_path, relu):
    path = qdq.residual(tmp_path / "residual.onnx", relu=relu, quantized_skip=True)
    check_against_reference(path, [1, 8, 10, 10], "FusedQLinearConv")
    fast = session(path)
    run(fast, inputs([1, 8, 10, 10]))
    ops = [e["op_type"] for e in fast.get_profile()]
    # The uint8 skip goes into the second convolution, which writes the quantized sum: no Add,
    # no float32 residual and no QuantizeLinear after it (only the input's).
    assert "Add" not in ops and "Relu" not in ops, ops
    assert ops.count("QuantizeLinear") == 1 and "DequantizeLinear" in ops, ops


def test_matmul_of_varying_rows_through_one_session(tmp_path):
    """One session, row counts that change run to run: each gets its own prepared product (the
    packed weight shared where the layout is the same), and every run matches the reference."""
    path = qdq.matmul(str(tmp_path / "m.onnx"), dynamic=True)
    fast, ref = session(path), session(path, optimize=False)
    step = output_step(path)
    for seed, shape in enumerate([(1, 3, 32), (2, 5, 32), (4, 7, 32), (1, 3, 32), (3, 1, 32)]):
        x = inputs(shape, seed)
        got, want = run(fast, x), run(ref, x)
        assert got.shape == want.shape == shape[:2] + (16,)
        assert np.abs(got - want).max() <= step * 1.001
    assert "FusedQLinearMatMul" in op_types(fast)


@pytest.mark.parametrize("case", [
    dict(),
    dict(trans_b=0),
    dict(alpha=0.5, beta=2.0),
    dict(act="relu"),
    dict(quantized_output=False),
    dict(per_channel=False),
])
def test_gemm(tmp_path, case):
    path = qdq.gemm(tmp_path / "gemm.onnx", **case)
    check_against_reference(path, [4, 32], "FusedQLinearMatMul")


@pytest.mark.parametrize("case", [dict(), dict(act=None), dict(quantized_output=False),
                                  dict(per_channel=False), dict(act="gelu"),
                                  dict(act="gelu", quantized_output=False, k=40, n=600)])
def test_matmul(tmp_path, case):
    # Gelu joins the product and runs as Kiln's loop after it (a chunk at a time: n = 600 makes
    # 6000 values, more than one chunk, with a tail).
    path = qdq.matmul(tmp_path / "matmul.onnx", **case)
    check_against_reference(path, [2, 5, case.get("k", 32)], "FusedQLinearMatMul")


def test_threads_agree(tmp_path):
    path = qdq.conv(tmp_path / "conv.onnx", c=16, m=32, hw=20, act="relu")
    x = inputs([2, 16, 20, 20])
    one, two = run(session(path, threads=1), x), run(session(path, threads=2), x)
    np.testing.assert_array_equal(one, two)


def rewrite_weights(path, change):
    """Applies change(w, zero) -> (w, zero) to every weight DequantizeLinear's constants."""
    m = onnx.load(path)
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0].startswith("w"):
            w, z = (numpy_helper.to_array(inits[n.input[k]]) for k in (0, 2))
            w, z = change(w, z)
            inits[n.input[0]].CopyFrom(numpy_helper.from_array(w, n.input[0]))
            inits[n.input[2]].CopyFrom(numpy_helper.from_array(z, n.input[2]))
    onnx.save(m, path)


def assert_on_int8_kernel(path, shape, fused):
    check_against_reference(path, shape, None)
    s = session(path)
    run(s, inputs(shape))
    assert (fused in op_types(s)) if fused else ("FusedQLinearConv" not in op_types(s))


def test_uint8_weights_run_on_the_int8_kernel(tmp_path):
    # onnxruntime's quantizer with weight_type QUInt8: uint8 weights around zero point 128. The
    # pass folds the zero point into an int8 constant (w - 128), exactly the same weights.
    path = qdq.conv(tmp_path / "conv.onnx")
    rewrite_weights(path, lambda w, z: ((w.astype(np.int16) + 128).astype(np.uint8),
                                        (z.astype(np.int16) + 128).astype(np.uint8)))
    assert_on_int8_kernel(path, [2, 8, 10, 10], "FusedQLinearConv")


@pytest.mark.parametrize("per_channel", [True, False])
def test_weight_zero_points_within_int8_run_on_the_int8_kernel(tmp_path, per_channel):
    # Asymmetric int8 weights whose w - zero point stays in int8: per channel (different zero
    # points) and per tensor; a MatMul too.
    path = qdq.conv(tmp_path / "conv.onnx", per_channel=per_channel)
    def shift(w, z):
        zero = (np.arange(z.size).reshape(z.shape) % 7 + 5).astype(np.int8)
        axis_shape = [-1] + [1] * (w.ndim - 1) if z.ndim else []
        w = np.clip(w.astype(np.int16), -100, 100) + zero.astype(np.int16).reshape(axis_shape)
        return w.astype(np.int8), zero
    rewrite_weights(path, shift)
    assert_on_int8_kernel(path, [2, 8, 10, 10], "FusedQLinearConv")
    mm = qdq.matmul(tmp_path / "matmul.onnx", per_channel=False)
    rewrite_weights(mm, lambda w, z: ((np.clip(w.astype(np.int16), -100, 100) - 9).astype(np.int8),
                                      np.int8(-9)))
    assert_on_int8_kernel(mm, [2, 5, 32], "FusedQLinearMatMul")


def uint8_weights_over_0_255(per_channel_zero):
    """onnxruntime's QUInt8 weights: uint8 over 0..255 with a zero point (one a channel: 100 +
    channel % 50), so w - zero point leaves int8 and the kernels widen their products."""
    def change(w, z):
        zero = (np.arange(z.size) % 50 + 100).astype(np.uint8).reshape(z.shape)
        if not per_channel_zero:
            zero = np.full(z.shape, 77, np.uint8)
        axis_shape = []
        if z.ndim:  # channels along the axis of z's length: 0, or a MatMul's [K, N] N
            axis_shape = [1] * w.ndim
            axis_shape[0 if w.shape[0] == z.size else 1] = -1
        spread = w.astype(np.int16) * 2 + zero.astype(np.int16).reshape(axis_shape)
        return np.clip(spread, 0, 255).astype(np.uint8), zero
    return change


@pytest.mark.parametrize("per_channel_zero", [True, False])
@pytest.mark.parametrize("case", [
    dict(),                                         # uint8 result, bias, no activation
    dict(act="relu", quantized_output=False),       # float32 result
    dict(act="clip"),
    dict(group=4, c=8, m=8),                        # grouped
    dict(group=16, c=16, m=16, stride=2, hw=11),    # depthwise, strided
    dict(k=5, pad=2, stride=2, hw=13, bias=False),  # padding read as the zero point
])
def test_uint8_weights_beyond_int8_run_on_the_int8_convolution(tmp_path, case, per_channel_zero):
    path = qdq.conv(tmp_path / "conv.onnx", **case)
    rewrite_weights(path, uint8_weights_over_0_255(per_channel_zero))
    shape = [2, case.get("c", 8), case.get("hw", 10), case.get("hw", 10)]
    check_against_reference(path, shape, "FusedQLinearConv")
    x = inputs(shape, seed=5)
    np.testing.assert_array_equal(run(session(path, threads=1), x), run(session(path, threads=2), x))


@pytest.mark.parametrize("quantized_skip", [True, False])
def test_uint8_weights_beyond_int8_with_a_residual(tmp_path, quantized_skip):
    path = qdq.residual(tmp_path / "res.onnx", quantized_skip=quantized_skip)
    rewrite_weights(path, uint8_weights_over_0_255(True))
    check_against_reference(path, [1, 8, 10, 10], "FusedQLinearConv")


@pytest.mark.parametrize("model", ["matmul", "matmul_float", "gemm", "gemm_per_tensor"])
def test_uint8_weights_beyond_int8_run_on_the_int8_matmul(tmp_path, model):
    if model.startswith("matmul"):
        path = qdq.matmul(tmp_path / "mm.onnx", quantized_output=model == "matmul")
        shape = [2, 5, 32]
    else:
        path = qdq.gemm(tmp_path / "gemm.onnx", per_channel=model == "gemm")  # transB: [N, K]
        shape = [4, 32]
    rewrite_weights(path, uint8_weights_over_0_255(True))
    check_against_reference(path, shape, "FusedQLinearMatMul")


@pytest.mark.parametrize("kind", ["uint8_per_tensor", "uint8_per_channel", "int8_zero_point"])
@pytest.mark.parametrize("model", ["conv", "grouped_conv", "matmul"])
def test_engine_stores_shifted_int8_weights_once(tmp_path, kind, model):
    # The int8 kernels pack w - z (or w - 128 for uint8 over 0..255); the engine stores that
    # packed form only, with the shift that gives the constant back, and computes as the ONNX
    # session does.
    # Weights of 64-256 KiB, so that a second copy would show in the file's size.
    if model == "matmul":
        path, shape = qdq.matmul(tmp_path / "m.onnx", k=256, n=256), [2, 5, 256]
    else:
        grouped = dict(group=4) if model == "grouped_conv" else {}
        path = qdq.conv(tmp_path / "m.onnx", c=128, m=128, hw=6, **grouped)
        shape = [2, 128, 6, 6]
    if kind == "int8_zero_point":
        rewrite_weights(path, lambda w, z: ((np.clip(w.astype(np.int16), -100, 100) - 9)
                                            .astype(np.int8), np.full(z.shape, -9, np.int8)))
    else:
        rewrite_weights(path, uint8_weights_over_0_255(kind == "uint8_per_channel"))
    engine = str(tmp_path / "m.kiln")
    kiln.compile(path, engine, verify=False)
    weight = max(numpy_helper.to_array(i).nbytes for i in onnx.load(path).graph.initializer)
    with_plain = str(tmp_path / "plain.kiln")
    kiln.compile(path, with_plain, verify=False, prepack=False)
    assert os.path.getsize(engine) < os.path.getsize(with_plain) + weight // 2
    x = inputs(shape, seed=7)
    np.testing.assert_array_equal(run(session(engine), x), run(session(path), x))


def test_int8_weight_zero_point_beyond_int8_runs_on_the_int8_convolution(tmp_path):
    # int8 weights over [-127, 127] with zero point 2: w - 2 reaches -129.
    path = qdq.conv(tmp_path / "conv.onnx", w_zero=2)
    check_against_reference(path, [2, 8, 10, 10], "FusedQLinearConv")


def qlinear_conv_model(tmp_path, w_scale_count=4, uint8_weights=False):
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    wz = np.zeros(w_scale_count, np.int8)
    if uint8_weights:  # over 0..255, a zero point a channel
        w = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
        wz = (np.arange(w_scale_count) * 40 + 30).astype(np.uint8)
    inits = [
        numpy_helper.from_array(np.float32(0.02), "xs"),
        numpy_helper.from_array(np.uint8(120), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(w_scale_count, 0.01, np.float32), "ws"),
        numpy_helper.from_array(wz, "wz"),
        numpy_helper.from_array(np.float32(0.05), "ys"),
        numpy_helper.from_array(np.uint8(128), "yz"),
        numpy_helper.from_array(rng.integers(-500, 500, 4).astype(np.int32), "b"),
    ]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "qlc",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    path = str(tmp_path / "qlinearconv.onnx")
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("uint8_weights", [False, True])
def test_onnx_qlinear_conv_runs_on_the_int8_kernel(tmp_path, uint8_weights):
    path = qlinear_conv_model(tmp_path, uint8_weights=uint8_weights)
    x = np.random.default_rng(4).integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
    fast, ref = session(path), session(path, optimize=False)
    got = fast.run(None, {"x": x})[0]
    want = ref.run(None, {"x": x})[0]
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = o.run(None, {"x": x})[0]
    assert np.abs(theirs.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_malformed_qlinear_conv_is_a_clear_error(tmp_path):
    # Three weight scales for four output channels: the op itself is invalid, on either path.
    path = qlinear_conv_model(tmp_path, w_scale_count=3)
    x = np.zeros((1, 3, 6, 6), np.uint8)
    for optimize in (True, False):
        with pytest.raises(Exception, match="w_scale|w zero point|elements"):
            session(path, optimize=optimize).run(None, {"x": x})


@pytest.mark.parametrize("output_dtype", [7, 999])
def test_output_dtype_naming_no_float_type_is_a_clear_error(tmp_path, output_dtype):
    # FusedQLinearMatMul's output_dtype (a half-precision engine's float result) names int64 or
    # nothing: refused with the attribute's name, and the session stays usable.
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.uint8), "z"),
             numpy_helper.from_array(np.ones((4, 3), np.int8), "w"),
             numpy_helper.from_array(np.ones(3, np.float32), "ws")]
    node = helper.make_node("FusedQLinearMatMul", ["a", "s", "z", "w", "ws"], ["y"],
                            domain="ai.kiln", output_dtype=output_dtype)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8,
                                                                     [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.kiln", 1)]), path)
    with pytest.raises(Exception, match="output_dtype"):
        session(str(path)).run(None, {"a": np.zeros((2, 4), np.uint8)})
    good = session(qdq.matmul(tmp_path / "good.onnx"))
    assert run(good, inputs([2, 5, 32])).shape == (2, 5, 16)


def test_residual_slot_on_a_qlinear_matmul_is_refused(tmp_path):
    # Slot 9 (a residual) is FusedQLinearConv's only: on FusedQLinearMatMul it is an error, not
    # an input the reference quietly drops.
    f32, u8 = TensorProto.FLOAT, TensorProto.UINT8
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z"),
             numpy_helper.from_array(np.ones((4, 3), np.int8), "w"),
             numpy_helper.from_array(np.array(0.05, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    node = helper.make_node("FusedQLinearMatMul", ["a", "s", "z", "w", "ws", "wz", "", "", "", "r"],
                            ["y"], domain="ai.kiln")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("a", u8, [2, 4]),
         helper.make_tensor_value_info("r", f32, [2, 3])],
        [helper.make_tensor_value_info("y", f32, [2, 3])], inits)
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("ai.kiln", 1)]), path)
    feeds = {"a": np.full((2, 4), 130, np.uint8), "r": np.ones((2, 3), np.float32)}
    for optimize in (True, False):
        with pytest.raises(Exception, match="no residual input"):
            session(str(path), optimize=optimize).run(None, feeds)


def test_zero_pad_joins_the_convolution(tmp_path):
    path = qdq.padded_depthwise(tmp_path / "pad.onnx")
    check_against_reference(path, [1, 3, 12, 12], "FusedQLinearConv")
    s = session(path)
    run(s, inputs([1, 3, 12, 12]))
    ops = [e["op_type"] for e in s.get_profile()]
    # No Pad left, and the first convolution writes uint8 for the depthwise one to read.
    assert "Pad" not in ops and ops.count("QuantizeLinear") == 1, ops


def test_quantize_moves_before_concat(tmp_path):
    path = qdq.branches(tmp_path / "branches.onnx")
    check_against_reference(path, [2, 8, 9, 9], "FusedQLinearConv")
    s = session(path)
    run(s, inputs([2, 8, 9, 9]))
    ops = [e["op_type"] for e in s.get_profile()]
    # The input's QuantizeLinear and the pool branch's: the convolution branches write uint8
    # themselves, and the Concat joins uint8 (its own QuantizeLinear is gone).
    assert ops.count("QuantizeLinear") == 2 and "Concat" in ops, ops
    assert ops.count("FusedQLinearConv") == 3, ops


def test_quantize_moves_before_max_pool(tmp_path):
    path = qdq.stem(tmp_path / "stem.onnx")
    check_against_reference(path, [1, 3, 20, 20], "FusedQLinearConv")
    s = session(path)
    run(s, inputs([1, 3, 20, 20]))
    ops = [e["op_type"] for e in s.get_profile()]
    # Only the input's QuantizeLinear is left: the stem convolution writes uint8 and the
    # pooling reads it.
    assert ops.count("QuantizeLinear") == 1 and "MaxPool" in ops, ops



@pytest.mark.parametrize("weight_type", ["QUInt8", "QInt8"])
def test_onnxruntime_dynamic_conv_runs_on_the_int8_kernel(tmp_path, weight_type):
    # onnxruntime's quantize_dynamic writes a convolution as DynamicQuantizeLinear -> ConvInteger
    # (uint8 weights around 128 by default) -> Cast -> Mul by the scales: the ConvInteger runs on
    # the int8 convolution and agrees with onnxruntime to float rounding.
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((12, 6, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(12).astype(np.float32) * 0.1, "b")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 10, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12, 10, 9])], [w, b])
    src, dst = tmp_path / "conv.onnx", tmp_path / "conv_dynamic.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    quantize_dynamic(str(src), str(dst), op_types_to_quantize=["Conv"],
                     weight_type=getattr(QuantType, weight_type))
    assert "ConvInteger" in {n.op_type for n in onnx.load(dst).graph.node}
    x = inputs([2, 6, 10, 9])
    s = session(str(dst))
    got = run(s, x)
    # (tests/cli/test_int8_kernels.py checks that it is the int8 convolution's kernel.)
    assert "ConvInteger" in op_types(s)
    o = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    theirs = o.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
    np.testing.assert_allclose(got, run(session(str(dst), optimize=False), x), rtol=1e-5,
                               atol=1e-5 * np.abs(theirs).max())


def quantize_with_onnxruntime(src, path, quant_format, weight_type, per_channel=False):
    """onnxruntime's quantize_static on four random [1, 8, 12, 12] inputs named x, uint8
    activations; weight_type QInt8 or QUInt8, quant_format QDQ or QOperator."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.sets = [{"x": inputs([1, 8, 12, 12], seed=s)} for s in range(4)]

        def get_next(self):
            return self.sets.pop() if self.sets else None

    quantize_static(src, str(path), Reader(), quant_format=getattr(QuantFormat, quant_format),
                    per_channel=per_channel, weight_type=getattr(QuantType, weight_type),
                    activation_type=QuantType.QUInt8)
    return str(path)


def float_residual_block(path):
    """x -> Conv -> Relu -> Conv -> Add(x) -> Relu, float32 (for onnxruntime's quantizer)."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), n)
             for n in ("w1", "w2")]
    inits += [numpy_helper.from_array(np.full(8, 0.05, np.float32), n) for n in ("b1", "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_onnxruntime_residual_block_joins_the_int8_convolution(tmp_path, weight_type):
    # onnxruntime's quantize_static writes a residual block as Conv -> Q -> DQ -> Add(DQ(skip))
    # -> Q: the round trip goes, the Add joins the convolution (an 8-bit residual), one rounding
    # fewer than the file asks, so within a step of onnxruntime's run.
    src = float_residual_block(tmp_path / "block.onnx")
    path = quantize_with_onnxruntime(src, tmp_path / "block_int8.onnx", "QDQ", weight_type)
    x = inputs([1, 8, 12, 12], seed=9)
    fast = session(path)
    got = run(fast, x)
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = o.run(None, {"x": x})[0]
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out_dq = next(n for n in m.graph.node if n.output[0] == m.graph.output[0].name)
    step = float(inits[out_dq.input[1]])
    # The dropped rounding moves a sum by at most half a step of the convolution's output: the
    # block's result by at most one of its own steps (on this small block, about a quarter of
    # the values).
    assert np.abs(got - theirs).max() <= 1.001 * step
    assert np.abs(got - theirs).mean() < 0.5 * step
    ops = op_types(fast)
    assert ops.count("FusedQLinearConv") == 1 and "Add" not in ops, ops


def float_contrib_model(path):
    """Ops onnxruntime's QOperator quantizer turns into com.microsoft QLinear* ops: LeakyRelu,
    Add, Sigmoid, Mul, AveragePool, Concat, GlobalAveragePool and Gemm (QGemm)."""
    rng = np.random.default_rng(12)
    def w(name, shape, s=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)
    inits = [w("w1", (8, 8, 3, 3)), w("w2", (8, 8, 3, 3)), w("wg", (10, 16), 0.3),
             numpy_helper.from_array(np.full(8, 0.05, np.float32), "b1"),
             numpy_helper.from_array(np.full(8, -0.05, np.float32), "b2"),
             numpy_helper.from_array(np.linspace(-0.5, 0.5, 10).astype(np.float32), "bg")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c1"], ["l1"], alpha=0.1),
             helper.make_node("Conv", ["l1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("Mul", ["s", "g"], ["m"]),
             helper.make_node("AveragePool", ["m"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxPool", ["m"], ["q"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["p", "q"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "contrib",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_onnxruntime_qoperator_contrib_ops(tmp_path, weight_type, per_channel):
    # quantize_static's QOperator format: ONNX QLinearConv beside com.microsoft QLinearAdd,
    # QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool, QLinearConcat,
    # QLinearGlobalAveragePool and QGemm, which Kiln imports as DequantizeLinear -> op ->
    # QuantizeLinear functions. Both of Kiln's paths agree with onnxruntime's run of the file
    # to a few output steps (each runtime rounds its own way at every quantized op).
    src = float_contrib_model(tmp_path / "contrib.onnx")
    path = quantize_with_onnxruntime(src, tmp_path / "contrib_int8.onnx", "QOperator",
                                     weight_type, per_channel)
    written = {(n.domain, n.op_type) for n in onnx.load(path).graph.node}
    for op in ("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
               "QLinearAveragePool", "QLinearConcat", "QLinearGlobalAveragePool", "QGemm"):
        assert ("com.microsoft", op) in written, written
    x = inputs([1, 8, 12, 12], seed=9)
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = o.run(None, {"x": x})[0]
    exact = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for optimize in (True, False):
        got = run(session(path, optimize=optimize), x)
        assert got.shape == theirs.shape
        rel = np.linalg.norm(got - theirs) / np.linalg.norm(theirs)
        assert rel < 0.05, (optimize, rel)
        # As close to the float model as onnxruntime's run is.
        ours_err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        theirs_err = np.linalg.norm(theirs - exact) / np.linalg.norm(exact)
        assert ours_err < 1.5 * theirs_err + 0.01, (optimize, ours_err, theirs_err)
    fast = session(path)
    run(fast, x)
    ops = op_types(fast)
    # The convolutions are ONNX's QLinearConv on the int8 kernel, QGemm's product an int8 matmul,
    # and QLinearAdd's sum joins the convolution before it (an 8-bit residual).
    assert "QLinearConv" in ops and "FusedQLinearMatMul" in ops and "Gemm" not in ops, ops
    assert "FusedQLinearConv" in ops and "Add" not in ops, ops


def one_contrib_node_model(tmp_path, node, x_shape):
    """A model of one com.microsoft node reading x (uint8) with scale s and zero point z."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    inits = [numpy_helper.from_array(np.float32(0.1), "s"),
             numpy_helper.from_array(np.uint8(3), "z")]
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13),
                                             helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    path = str(tmp_path / "contrib_node.onnx")
    onnx.save(model, path)
    return path


def test_contrib_qlinear_without_output_zero_point_is_a_clear_error(tmp_path):
    node = helper.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s"], ["y"],
                            domain="com.microsoft")
    with pytest.raises(Exception, match="output zero point"):
        session(one_contrib_node_model(tmp_path, node, [4]))


@pytest.mark.parametrize("node, why", [
    (helper.make_node("QGemm", ["x", "s"], ["y"], domain="com.microsoft"), "input 3 is required"),
    (helper.make_node("QLinearAveragePool", ["x", "s", "z", "s", "z"], ["y"],
                      domain="com.microsoft", channels_last=1.5), "'channels_last' must be an int"),
])
def test_contrib_malformed_nodes_are_clear_errors(tmp_path, node, why):
    with pytest.raises(Exception, match=why):
        session(one_contrib_node_model(tmp_path, node, [1, 4, 4, 4]))


def test_contrib_channels_last_pooling_is_refused_by_name(tmp_path):
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"],
                            domain="com.microsoft", name="gap", channels_last=1)
    with pytest.raises(Exception, match="gap.*channels_last=1 is not supported"):
        session(one_contrib_node_model(tmp_path, node, [1, 4, 4, 3]))


def test_requantize_round_trip_is_dropped(tmp_path):
    # Q -> DQ -> MaxPool -> Q (the MaxPool keeping its input's scale and zero point, as
    # onnxruntime's quantizer writes it) -> DQ: the QuantizeLinear moves before the MaxPool,
    # where it requantizes with the parameters it was dequantized with, which is exact: it goes.
    s, z = np.float32(0.05), np.uint8(7)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
             helper.make_node("MaxPool", ["d0"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / "pool.onnx")
    onnx.save(model, path)
    x = inputs([1, 4, 8, 8], seed=3)
    fast = session(path)
    np.testing.assert_array_equal(run(fast, x), run(session(path, optimize=False), x))
    kinds = [e["op_type"] for e in fast.get_profile()]
    assert kinds.count("QuantizeLinear") == 1 and kinds.count("DequantizeLinear") == 1, kinds
