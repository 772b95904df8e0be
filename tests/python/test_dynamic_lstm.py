"""Dynamic INT8 LSTM: `kiln.quantize(dynamic=True)` writes com.microsoft DynamicQuantizeLSTM
(int8 W and R, onnxruntime's contrib op) and Kiln runs it (ops/dynamic_quantize_lstm.cpp).

On a generated LSTM (no download): the quantized model stays close to the float one; onnxruntime
runs Kiln's file as Kiln does and Kiln runs onnxruntime's own `quantize_dynamic` file as
onnxruntime does (both to float rounding); LSTM forms the op cannot hold are left float32 with
the reason, and a model with nothing else to quantize is refused naming it. The CPU's fast kernel
and the reference kernel are both held to onnxruntime."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

SEQ, BATCH, INPUT, HIDDEN = 12, 2, 10, 16


def lstm_model(path, direction="forward", layout=None, activations=None, seq_lens=False, clip=None,
               seed=0):
    """X [seq, batch, input] -> LSTM (hidden 16, with biases) -> Y, Y_h, Y_c."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    scale = 1 / np.sqrt(HIDDEN)
    w = (rng.standard_normal((dirs, 4 * HIDDEN, INPUT)) * scale).astype(np.float32)
    r = (rng.standard_normal((dirs, 4 * HIDDEN, HIDDEN)) * scale).astype(np.float32)
    b = (rng.standard_normal((dirs, 8 * HIDDEN)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(b, "B")]
    inputs = ["X", "W", "R", "B"]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [SEQ, BATCH, INPUT])]
    if seq_lens:
        inits.append(numpy_helper.from_array(np.full(BATCH, SEQ, np.int32), "lens"))
        inputs.append("lens")
    attrs = {"hidden_size": HIDDEN, "direction": direction}
    if layout is not None:
        attrs["layout"] = layout
    if activations:
        attrs["activations"] = activations
    if clip is not None:
        attrs["clip"] = clip
    node = helper.make_node("LSTM", inputs, ["Y", "Y_h", "Y_c"], name="lstm", **attrs)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")]
    graph = helper.make_graph([node], "lstm", graph_inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def inputs(seed, sets=1):
    rng = np.random.default_rng(seed)
    return [{"X": rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)} for _ in range(sets)]


def ort_session(path):
    # onnxruntime quantizes each step's hidden state in blocks of ceil(batch / threads) rows;
    # with a thread per batch entry that is one entry a block, as Kiln does.
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = BATCH
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def op_types(path):
    return [(n.domain, n.op_type) for n in onnx.load(path).graph.node]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_kiln_dynamic_lstm_close_to_float_and_runs_in_onnxruntime(tmp_path, direction,
                                                                  per_channel):
    src = lstm_model(str(tmp_path / "lstm.onnx"), direction)
    out = str(tmp_path / "lstm.int8.onnx")
    result = kiln.quantize(src, out, dynamic=True, per_channel=per_channel,
                           calibration=inputs(1, sets=4))
    assert result.passed and result.quantized_nodes == 1
    assert op_types(out) == [("com.microsoft", "DynamicQuantizeLSTM")]
    weights = {i.name: i for i in onnx.load(out).graph.initializer}
    assert {w.data_type for n, w in weights.items() if n.endswith("_quantized")} == {
        TensorProto.INT8}
    dirs = 2 if direction == "bidirectional" else 1
    assert list(weights["W_quantized"].dims) == [dirs, INPUT, 4 * HIDDEN]  # transposed
    assert list(weights["W_scale"].dims) == ([dirs, 4 * HIDDEN] if per_channel else [dirs])

    float_sess = kiln.InferenceSession(src)
    int8_sess = kiln.InferenceSession(out)
    ort_int8 = ort_session(out)
    for feeds in inputs(2, sets=3):
        want = float_sess.run(None, feeds)
        got = int8_sess.run(None, feeds)
        for w, g in zip(want, got):
            assert w.shape == g.shape
            # int8 weights and uint8 activations: a few hundredths on values in (-1, 1).
            assert np.abs(w - g).max() < 0.06
            cos = float(np.dot(w.ravel(), g.ravel()) / np.linalg.norm(w) / np.linalg.norm(g))
            assert cos > 0.998
        # onnxruntime runs the same file to float rounding.
        theirs = ort_int8.run(None, feeds)
        for t, g in zip(theirs, got):
            np.testing.assert_allclose(g, t, atol=2e-6, rtol=0)


# Without clip the CPU runs cpu.dynamic_quantize_lstm (AVX-512 VNNI, where the CPU has it); with
# clip it runs the reference kernel: both held to onnxruntime's run of the same file.
@pytest.mark.parametrize("clip", [None, 0.6])
def test_kiln_runs_onnxruntime_quantize_dynamic_lstm(tmp_path, clip):
    quantization = pytest.importorskip("onnxruntime.quantization")
    src = lstm_model(str(tmp_path / "lstm.onnx"), "bidirectional", clip=clip)
    for per_channel in (True, False):
        out = str(tmp_path / f"ort_{per_channel}.onnx")
        quantization.quantize_dynamic(src, out, per_channel=per_channel,
                                      weight_type=quantization.QuantType.QInt8)
        assert ("com.microsoft", "DynamicQuantizeLSTM") in op_types(out)
        ours, theirs = kiln.InferenceSession(out), ort_session(out)
        for feeds in inputs(3, sets=2):
            for g, t in zip(ours.run(None, feeds), theirs.run(None, feeds)):
                np.testing.assert_allclose(g, t, atol=2e-6, rtol=0)


@pytest.mark.parametrize("form, why", [
    ({"layout": 1}, "layout 1"),
    ({"activations": ["Relu", "Tanh", "Tanh"]}, "activation 'Relu'"),
    ({"seq_lens": True}, "sequence_lens"),
])
def test_unsupported_lstm_forms_are_refused_with_the_reason(tmp_path, form, why):
    src = lstm_model(str(tmp_path / "lstm.onnx"), **form)
    out = tmp_path / "lstm.int8.onnx"
    with pytest.raises(kiln.InvalidArgument) as err:
        kiln.quantize(src, str(out), dynamic=True, calibration=inputs(1))
    assert "no Conv / MatMul / Gemm / LSTM" in str(err.value)
    assert not out.exists()


def add_matmul_head(model):
    """A MatMul 'head' (hidden -> 4) on the LSTM's Y_h, whose Z becomes the only output."""
    w = np.random.default_rng(5).standard_normal((HIDDEN, 4)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(w, "M"))
    model.graph.node.append(helper.make_node("MatMul", ["Y_h", "M"], ["Z"], name="head"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, None))


def test_unsupported_lstm_form_left_float_beside_quantized_nodes(tmp_path):
    # A layout-1 LSTM then a MatMul: the MatMul is quantized, the LSTM kept float32 and named.
    src = lstm_model(str(tmp_path / "lstm.onnx"), layout=1)
    model = onnx.load(src)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = BATCH
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = SEQ
    add_matmul_head(model)
    onnx.save(model, src)
    said = []
    rng = np.random.default_rng(1)
    sets = [{"X": rng.standard_normal((BATCH, SEQ, INPUT)).astype(np.float32)} for _ in range(2)]
    kiln.quantize(src, str(tmp_path / "out.onnx"), dynamic=True, calibration=sets,
                  log=lambda kind, text: said.append(text))
    assert any("left float32: lstm (layout 1" in s for s in said), said
    types = [t for _, t in op_types(str(tmp_path / "out.onnx"))]
    assert "LSTM" in types and "MatMulInteger" in types


def test_task_gate_measures_the_lstm(tmp_path):
    # LSTM -> MatMul head: --metric cosine --max-drop measures each node's own drop, the LSTM's
    # included, and writes them to the sensitivity report.
    src = lstm_model(str(tmp_path / "lstm.onnx"))
    model = onnx.load(src)
    add_matmul_head(model)
    onnx.save(model, src)
    report = tmp_path / "sensitivity.json"
    result = kiln.quantize(src, str(tmp_path / "out.onnx"), dynamic=True, metric="cosine",
                           max_drop=0.05, calibration=inputs(1, sets=3),
                           sensitivity_report=str(report))
    assert result.passed and result.quantized_nodes == 2 and result.metric_drop <= 0.05
    nodes = {n["node"]: n["drop"] for n in json.loads(report.read_text())["nodes"]}
    assert set(nodes) == {"lstm", "head"}
    assert all(0 <= d < 0.05 for d in nodes.values())


def test_compile_gate_allows_a_step_of_requantization_noise(tmp_path):
    # An engine with DynamicQuantizeLSTM is held to relative L2 5e-2 of the reference (not the
    # float default): a rounding tie in the hidden state's requantization moves later steps.
    src = lstm_model(str(tmp_path / "lstm.onnx"))
    out = str(tmp_path / "lstm.int8.onnx")
    kiln.quantize(src, out, dynamic=True, calibration=inputs(1, sets=2))
    said = []
    kiln.compile(out, str(tmp_path / "lstm.kiln"), log=lambda kind, text: said.append(text))
    assert any("relative L2 5e-02" in s for s in said), said
    sess = kiln.InferenceSession(str(tmp_path / "lstm.kiln"))
    feeds = inputs(4)[0]
    np.testing.assert_allclose(sess.run(None, feeds)[1], ort_session(out).run(None, feeds)[1],
                               atol=2e-6, rtol=0)
