"""kiln quantize: static INT8 into a QDQ ONNX model, calibrated on .npz input sets, held to a task
metric (cosine, top-1 agreement). The file must open in onnxruntime and give what Kiln gives,
stay close to the float model, and not be worse than onnxruntime's own quantizer on the same
calibration data; the gate refuses a model that misses its limit and names the drifting nodes."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_fp16 import read_output, small_cnn, write_tensor


def cosine(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def calibration_sets(tmp_path, count=8, seed=0):
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = tmp_path / f"cal{i}.npz"
        np.savez(path, image=rng.standard_normal((4, 3, 16, 16)).astype(np.float32))
        paths.append(path)
    return paths


def npz_flags(paths):
    flags = []
    for p in paths:
        flags += ["--calibration-npz", p]
    return flags


def test_quantize_cnn_runs_in_onnxruntime_and_matches_its_quantizer(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path)
    out = tmp_path / "cnn.int8.onnx"
    r = kiln("quantize", model, "-o", out, *npz_flags(cal), "--min-top1", "0.9")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"quantize: 4 of the model's \d+ nodes quantized \(4 activations", r.stdout)
    assert "calibrated (minmax) on 8 input sets" in r.stdout
    assert re.search(r"output 'probs': cosine 0\.99\d+ \(>= 0\.99\), top-1 agreement", r.stdout)

    q = onnx.load(str(out))
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") == 4 and ops.count("DequantizeLinear") == 8
    int8 = [i for i in q.graph.initializer if i.data_type == TensorProto.INT8]
    assert len(int8) >= 4  # the weights (and their zero points)
    weights = {i.name: numpy_helper.to_array(i) for i in int8 if i.name.endswith("_quantized")}
    assert all(np.abs(w).max() == 127 for w in weights.values())  # symmetric, full range
    per_axis = [n for n in q.graph.node
                if n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute)]
    assert len(per_axis) == 4  # one scale per output channel

    # Held-out data: onnxruntime runs Kiln's file; Kiln runs it too and agrees.
    x = np.random.default_rng(5).standard_normal((16, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(model)).run(["logits"], {"image": x})[0]
    ours_in_ort = ort.InferenceSession(str(out)).run(["logits"], {"image": x})[0]
    write_tensor(tmp_path / "x.pb", x, "image")
    assert kiln("run", out, "--input", f"image={tmp_path / 'x.pb'}", "--output-dir",
                tmp_path / "o").returncode == 0
    ours_in_kiln = read_output(tmp_path / "o" / "logits.pb")
    assert np.abs(ours_in_kiln - ours_in_ort).max() <= 1e-3 * np.abs(ours_in_ort).max() + 1e-5
    assert cosine(ours_in_ort, want) > 0.99
    assert (ours_in_ort.argmax(1) == want.argmax(1)).mean() >= 0.9
    # onnxruntime's own static quantizer on the same data, in the same format.
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.sets = iter([{"image": np.load(p)["image"]} for p in cal])

        def get_next(self):
            return next(self.sets, None)

    theirs = tmp_path / "cnn.ort.int8.onnx"
    quantize_static(str(model), str(theirs), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"])
    theirs_out = ort.InferenceSession(str(theirs)).run(["logits"], {"image": x})[0]
    assert cosine(ours_in_ort, want) >= cosine(theirs_out, want) - 2e-3


def test_quantize_gate_refuses_and_names_the_drifting_nodes(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path, count=2)
    out = tmp_path / "q.onnx"
    r = kiln("quantize", model, "-o", out, *npz_flags(cal), "--min-cosine", "0.9999999")
    assert r.returncode == 1
    assert "quantize gate: output" in r.stderr and "has cosine below 0.9999999" in r.stderr
    assert re.search(r"the quantized nodes that drift most: (Conv|Gemm) #\d", r.stderr), r.stderr
    assert not out.exists()
    r = kiln("quantize", model, "-o", out, *npz_flags(cal), "--min-cosine", "0.9999999",
             "--allow-drift")
    assert r.returncode == 0 and out.exists()
    assert "quantize gate:" in r.stderr


def test_quantize_options_percentile_per_tensor_exclusions(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path, count=3)
    out = tmp_path / "p.onnx"
    r = kiln("quantize", model, "-o", out, *npz_flags(cal), "--method", "percentile",
             "--percentile", "99.9", "--per-tensor", "--ops", "Conv")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "calibrated (percentile 99.9) on 3" in r.stdout and "3 of the model's" in r.stdout
    q = onnx.load(str(out))
    assert not any(a.name == "axis" for n in q.graph.node for a in n.attribute
                   if n.op_type == "DequantizeLinear")
    assert [n.op_type for n in q.graph.node].count("Gemm") == 1
    # The first Conv left float32 by name.
    named = onnx.load(str(model))
    for i, n in enumerate(named.graph.node):
        n.name = f"node{i}"
    onnx.save(named, str(tmp_path / "named.onnx"))
    r = kiln("quantize", tmp_path / "named.onnx", "-o", out, *npz_flags(cal), "--exclude-node",
             "node0")
    assert r.returncode == 0, r.stderr
    assert "3 of the model's" in r.stdout
    first = next(n for n in onnx.load(str(out)).graph.node if n.name == "node0")
    assert first.input[0] == "image"


def test_quantize_refuses_old_opsets_and_models_without_weights(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    m = onnx.load(str(model))
    m.opset_import[0].version = 11
    onnx.save(m, str(tmp_path / "old.onnx"))
    r = kiln("quantize", tmp_path / "old.onnx", "-o", tmp_path / "q.onnx")
    assert r.returncode == 1 and "opset 11; per-channel QDQ needs opset 13" in r.stderr
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "relu.onnx"))
    r = kiln("quantize", tmp_path / "relu.onnx", "-o", tmp_path / "q.onnx")
    assert r.returncode == 1 and "no Conv / MatMul / Gemm with a constant float32 weight" in r.stderr
    assert kiln("quantize", model, "-o", tmp_path / "q.onnx", "--method", "kl").returncode == 2
    r = kiln("quantize", model, "-o", tmp_path / "no" / "such" / "q.onnx")
    assert r.returncode == 1 and "its directory does not exist" in r.stderr
    r = kiln("quantize", model, "-o", model)
    assert r.returncode == 1 and "would overwrite the model" in r.stderr


@pytest.mark.parametrize("flag", ["--calibration-npz", "--method", "--min-cosine", "--min-top1",
                                  "entropy", "--calibration-cache", "--metric", "--max-drop",
                                  "--metric-timeout", "--sensitivity-report", "--max-collapsed"])
def test_quantize_help_lists_its_flags(kiln, flag):
    r = kiln("quantize", "--help")
    assert r.returncode == 0 and flag in r.stdout


def test_dynamic_int8_transformer_matches_onnxruntimes_quantize_dynamic(kiln, tmp_path):
    """--dynamic: MatMul as MatMulInteger on DynamicQuantizeLinear (onnxruntime's
    quantize_dynamic form): the same accuracy as onnxruntime's file on held-out data, and Kiln
    runs the file as onnxruntime does."""
    import make_transformer_model

    model = tmp_path / "enc.onnx"
    make_transformer_model.build(str(model), layers=2, hidden=64, heads=4)
    rng = np.random.default_rng(0)
    cal = []
    for i in range(3):
        cal.append(tmp_path / f"e{i}.npz")
        np.savez(cal[-1], x=rng.standard_normal((2, 16, 64)).astype(np.float32),
                 mask=np.zeros((2, 1, 1, 16), np.float32))
    out = tmp_path / "enc.dyn.onnx"
    r = kiln("quantize", model, "-o", out, "--dynamic", *npz_flags(cal))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"12 of the model's \d+ nodes quantized \(\d+ activations through "
                     r"DynamicQuantizeLinear, 12 int8 weights", r.stdout), r.stdout
    q = onnx.load(str(out))
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("MatMulInteger") == 12 and "QuantizeLinear" not in ops
    x = rng.standard_normal((3, 16, 64)).astype(np.float32)
    mask = np.zeros((3, 1, 1, 16), np.float32)
    mask[2, ..., 10:] = -10000.0
    feeds = {"x": x, "mask": mask}
    want = ort.InferenceSession(str(model)).run(None, feeds)[0]
    ours = ort.InferenceSession(str(out)).run(None, feeds)[0]
    from onnxruntime.quantization import QuantType, quantize_dynamic
    theirs_path = tmp_path / "enc.ort.onnx"
    quantize_dynamic(str(model), str(theirs_path), per_channel=True, weight_type=QuantType.QInt8)
    theirs = ort.InferenceSession(str(theirs_path)).run(None, feeds)[0]
    assert cosine(ours, want) > 0.99
    assert cosine(ours, want) >= cosine(theirs, want) - 1e-4
    write_tensor(tmp_path / "x.pb", x, "x")
    write_tensor(tmp_path / "m.pb", mask, "mask")
    assert kiln("run", out, "--input", f"x={tmp_path / 'x.pb'}", "--input",
                f"mask={tmp_path / 'm.pb'}", "--output-dir", tmp_path / "o").returncode == 0
    mine = read_output(tmp_path / "o" / "hidden.pb")
    assert np.abs(mine - ours).max() <= 1e-5 * np.abs(ours).max()


def test_dynamic_int8_gemm_with_transposes_alpha_beta_and_c(kiln, tmp_path):
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32), "w")  # [N, K]
    c = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "c")
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    g = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["n", 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])],
                          [w, c])
    model = tmp_path / "gemm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    out = tmp_path / "gemm.dyn.onnx"
    r = kiln("quantize", model, "-o", out, "--dynamic", "--min-cosine", "0.999")
    assert r.returncode == 0, r.stdout + r.stderr
    x = rng.standard_normal((7, 40)).astype(np.float32)
    want = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    assert cosine(got, want) > 0.999
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def outlier_model(tmp_path):
    """Conv "first", a Mul that makes one channel 1000x the others, Conv "second" that hardly
    reads that channel: quantizing "second"'s input leaves the other channels a few steps."""
    rng = np.random.default_rng(6)
    scale = np.ones((1, 8, 1, 1), np.float32)
    scale[0, 3] = 1000.0
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1
    w2[:, 3] *= 1e-4  # the output hardly depends on the outlier channel
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
                                     "w1"),
             numpy_helper.from_array(scale, "spread"), numpy_helper.from_array(w2, "w2")]
    nodes = [helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1], name="first"),
             helper.make_node("Mul", ["c1", "spread"], ["m"]),
             helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1], name="second")]
    g = helper.make_graph(nodes, "outlier",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                         [4, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8, 16, 16])],
                          inits)
    model = tmp_path / "outlier.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    return model


def test_fallback_keeps_the_most_drifting_node_float32(kiln, tmp_path):
    """One channel 1000x the others before the second Conv, which hardly reads it: per-tensor
    uint8 activations leave the other channels a few steps, so that Conv's output drifts. The gate refuses the fully
    quantized model; the fallback keeps that Conv float32 (and only it) and the model passes."""
    model = outlier_model(tmp_path)
    cal = calibration_sets(tmp_path, count=2)
    # --max-collapsed 1: the collapse trap (test_collapse_trap_*) would keep "second" float32 first.
    r = kiln("quantize", model, "-o", tmp_path / "none.onnx", *npz_flags(cal), "--min-cosine",
             "0.9999", "--fallback-nodes", "0", "--max-collapsed", "1")
    assert r.returncode == 1 and "has cosine below 0.9999" in r.stderr, r.stdout + r.stderr
    assert re.search(r"drift most: second 0\.\d+, first", r.stderr), r.stderr
    r = kiln("quantize", model, "-o", tmp_path / "q.onnx", *npz_flags(cal), "--min-cosine",
             "0.9999", "--max-collapsed", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keeping second float32" in r.stdout
    assert "1 node kept float32 by the fallback: second" in r.stdout
    q = onnx.load(str(tmp_path / "q.onnx"))
    second = next(n for n in q.graph.node if n.name == "second")
    assert second.input[0] == "m" and second.input[1] == "w2"  # float32 as it was
    first = next(n for n in q.graph.node if n.name == "first")
    assert first.input[0] != "image"  # quantized


def detection_head_model(tmp_path):
    """A detection head's trap: 6 score columns in [0, 1] concatenated with 2 box columns in
    [0, 640] feed a MatMul; uint8 over [0, 640] has a step of 2.5, so every score quantizes to
    0. A second MatMul reads ordinary features."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w_head"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w_feat")]
    nodes = [helper.make_node("Concat", ["scores", "boxes"], ["head"], axis=1),
             helper.make_node("MatMul", ["head", "w_head"], ["y"], name="head_matmul"),
             helper.make_node("MatMul", ["feat", "w_feat"], ["z"], name="feature_matmul")]
    g = helper.make_graph(nodes, "detection_head",
                          [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [16, 6]),
                           helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [16, 2]),
                           helper.make_tensor_value_info("feat", TensorProto.FLOAT, [16, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [16, 4])],
                          inits)
    model = tmp_path / "head.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    paths = []
    for i in range(3):
        path = tmp_path / f"head{i}.npz"
        np.savez(path, scores=rng.uniform(0.01, 1, (16, 6)).astype(np.float32),
                 boxes=rng.uniform(0, 640, (16, 2)).astype(np.float32),
                 feat=rng.standard_normal((16, 4)).astype(np.float32))
        paths.append(path)
    return model, paths


def test_collapse_trap_keeps_the_node_float32_and_says_so(kiln, tmp_path):
    """By default the MatMul whose input would collapse stays float32 (named, with the share and
    the step), the other one is quantized; --max-collapsed 1 quantizes both (the output's cosine
    hardly sees the lost scores: the boxes dominate it, which is why the trap is checked on the
    input's values and not left to the gate)."""
    model, cal = detection_head_model(tmp_path)
    r = kiln("quantize", model, "-o", tmp_path / "q.onnx", *npz_flags(cal))
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"keeping head_matmul float32: (\d+) % of its input's nonzero values would "
                  r"quantize to zero \(range \[0, 6\d\d\.?\d*\], step 2\.\d+\)", r.stdout)
    assert m and int(m.group(1)) >= 70, r.stdout
    assert "feature_matmul float32" not in r.stdout
    q = onnx.load(str(tmp_path / "q.onnx"))
    head = next(n for n in q.graph.node if n.name == "head_matmul")
    assert head.input[0] == "head" and head.input[1] == "w_head"  # float32 as it was
    feature = next(n for n in q.graph.node if n.name == "feature_matmul")
    assert feature.input[0] != "feat"  # quantized
    r = kiln("quantize", model, "-o", tmp_path / "naive.onnx", *npz_flags(cal),
             "--max-collapsed", "1")
    assert r.returncode == 0 and "float32:" not in r.stdout, r.stdout + r.stderr
    naive = onnx.load(str(tmp_path / "naive.onnx"))
    head = next(n for n in naive.graph.node if n.name == "head_matmul")
    assert head.input[0] != "head"  # quantized: its scores all at the zero point
    r = kiln("quantize", model, "-o", tmp_path / "x.onnx", *npz_flags(cal), "--max-collapsed", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    # With the other node excluded nothing would be left to quantize: refused, not written.
    r = kiln("quantize", model, "-o", tmp_path / "y.onnx", *npz_flags(cal), "--exclude-node",
             "feature_matmul")
    assert r.returncode == 1 and "every node's input would collapse to zero" in r.stderr, r.stderr
    assert not (tmp_path / "y.onnx").exists()


def test_quantize_runs_have_a_time_limit(kiln, tmp_path):
    """A model that asks for unbounded work (a Loop of 2^62 trips before its MatMul) stops at
    --run-timeout with a clear error instead of holding the quantizer forever."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones((1, 4), np.float32), "one")])
    nodes = [helper.make_node("Loop", ["trips", "cond", "x"], ["looped"], body=body),
             helper.make_node("MatMul", ["looped", "w"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1 << 62, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "cond"),
             numpy_helper.from_array(np.ones((4, 3), np.float32), "w")]
    g = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    model = tmp_path / "loop.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    r = kiln("quantize", model, "-o", tmp_path / "q.onnx", "--run-timeout", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stopped at the run time limit (1 s, --run-timeout)" in r.stderr, r.stderr
    assert not (tmp_path / "q.onnx").exists()


def scale_of(model_path, value):
    """The scale of the QuantizeLinear that reads `value`."""
    m = onnx.load(str(model_path))
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == value)
    return float(next(numpy_helper.to_array(i) for i in m.graph.initializer
                      if i.name == q.input[1]))


def test_entropy_clips_outliers_and_passes_the_gate(kiln, tmp_path):
    """--method entropy: on calibration sets with a few far outliers in the image, the image's
    range is clipped well inside minmax's, and on held-out inputs without outliers the model is
    closer to the float one than minmax's; the gate passes on the small CNN."""
    model = small_cnn(tmp_path / "cnn.onnx")
    rng = np.random.default_rng(1)
    cal = []
    for i in range(8):
        x = rng.standard_normal((64, 3, 16, 16)).astype(np.float32)
        x.flat[rng.integers(0, x.size, 3)] = 60.0  # a few far outliers a set (of 49152 values)
        path = tmp_path / f"outliers{i}.npz"
        np.savez(path, image=x)
        cal.append(path)
    outs = {}
    for method in ("minmax", "entropy"):
        outs[method] = tmp_path / f"{method}.onnx"
        r = kiln("quantize", model, "-o", outs[method], *npz_flags(cal), "--method", method,
                 "--min-top1", "0.9", "--allow-drift")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"calibrated ({method}) on 8 input sets" in r.stdout
    assert scale_of(outs["entropy"], "image") < 0.5 * scale_of(outs["minmax"], "image")
    x = np.random.default_rng(5).standard_normal((32, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(model)).run(["logits"], {"image": x})[0]
    got = {m: ort.InferenceSession(str(p)).run(["logits"], {"image": x})[0]
           for m, p in outs.items()}
    assert cosine(got["entropy"], want) > cosine(got["minmax"], want)
    # On the clean sets the gate passes with entropy's ranges.
    (tmp_path / "clean").mkdir()
    clean = calibration_sets(tmp_path / "clean", count=8, seed=3)
    r = kiln("quantize", model, "-o", tmp_path / "clean.onnx", *npz_flags(clean), "--method",
             "entropy", "--min-top1", "0.9")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"output 'probs': cosine 0\.99\d+ \(>= 0\.99\), top-1 agreement", r.stdout)


def test_calibration_cache_skips_the_calibration_runs(kiln, tmp_path):
    """--calibration-cache: the first run writes the histograms, the second (same model, same
    data) reads them and writes the same file; another method reads them too; other data or
    another model calibrate again and rewrite the cache."""
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path, count=4)
    cache = tmp_path / "cal.cache"
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    r = kiln("quantize", model, "-o", first, *npz_flags(cal), "--calibration-cache", cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "does not exist yet: calibrating" in r.stdout
    assert f"calibration cache written: {cache} (4 values)" in r.stdout
    assert cache.exists() and cache.stat().st_size < 64 * 1024
    r = kiln("quantize", model, "-o", second, *npz_flags(cal), "--calibration-cache", cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "calibration read from the cache" in r.stdout
    assert "calibrated (minmax, ranges from the calibration cache)" in r.stdout
    assert first.read_bytes() == second.read_bytes()
    # The histograms serve every method: the same file as without a cache.
    for method in ("percentile", "entropy"):
        a, b = tmp_path / f"{method}_cached.onnx", tmp_path / f"{method}_plain.onnx"
        r = kiln("quantize", model, "-o", a, *npz_flags(cal), "--method", method,
                 "--calibration-cache", cache)
        assert r.returncode == 0 and "calibration read from the cache" in r.stdout, r.stderr
        assert kiln("quantize", model, "-o", b, *npz_flags(cal), "--method",
                    method).returncode == 0
        assert a.read_bytes() == b.read_bytes()
    # Other data: calibrated again, the cache rewritten for it.
    (tmp_path / "other").mkdir()
    other = calibration_sets(tmp_path / "other", count=1, seed=9)
    r = kiln("quantize", model, "-o", second, *npz_flags(other), "--calibration-cache", cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is for other calibration data" in r.stdout and "calibrating again" in r.stdout
    r = kiln("quantize", model, "-o", second, *npz_flags(other), "--calibration-cache", cache)
    assert "calibration read from the cache" in r.stdout
    # Another model.
    other_model = small_cnn(tmp_path / "cnn2.onnx", seed=1)
    r = kiln("quantize", other_model, "-o", second, *npz_flags(other), "--calibration-cache",
             cache)
    assert r.returncode == 0 and "is for another model" in r.stdout, r.stdout + r.stderr


def test_calibration_cache_rejects_malformed_files(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path, count=2)
    cache = tmp_path / "cal.cache"
    assert kiln("quantize", model, "-o", tmp_path / "q.onnx", *npz_flags(cal),
                "--calibration-cache", cache).returncode == 0
    good = cache.read_bytes()
    for bad, why in ((b"garbage", "magic bytes"), (good[:len(good) // 2], "it ends inside"),
                     (good + b"\0", "1 bytes follow its last value"),
                     (good[:8] + b"\x07" + good[9:], "version 7")):
        cache.write_bytes(bad)
        out = tmp_path / "bad.onnx"
        r = kiln("quantize", model, "-o", out, *npz_flags(cal), "--calibration-cache", cache)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"the calibration cache '{cache}' is malformed" in r.stderr and why in r.stderr, \
            r.stderr
        assert not out.exists()
    r = kiln("quantize", model, "-o", tmp_path / "d.onnx", *npz_flags(cal), "--dynamic",
             "--calibration-cache", cache)
    assert r.returncode == 1 and "--dynamic has none" in r.stderr, r.stderr


def test_max_drop_keeps_the_most_sensitive_node_and_reports_sensitivity(kiln, tmp_path):
    """--metric cosine --max-drop: the fully quantized outlier model drops too much; each node's
    drop when alone quantized ranks "second" first, the fallback keeps it float32 and the model
    passes; the sensitivity report has both nodes, most sensitive first."""
    model = outlier_model(tmp_path)  # --max-collapsed 1: past the collapse trap, for the gate
    cal = calibration_sets(tmp_path, count=2)
    report = tmp_path / "sens.json"
    r = kiln("quantize", model, "--max-collapsed", "1",
             "-o", tmp_path / "none.onnx", *npz_flags(cal), "--metric",
             "cosine", "--max-drop", "1e-4", "--fallback-nodes", "0", "--sensitivity-report",
             report)
    assert r.returncode == 1, r.stdout + r.stderr
    # (Fully quantized, "second"'s output loses its signal: cosine 0, a drop of 1.)
    assert re.search(r"metric cosine drops \d\.\d+ from the float model's 1\.00000, past "
                     r"--max-drop 0\.0001; the most sensitive nodes still quantized: second "
                     r"\(\d\.\d+\), first", r.stderr), r.stderr
    assert not (tmp_path / "none.onnx").exists()
    import json
    sens = json.loads(report.read_text())
    assert sens["metric"] == "cosine" and sens["float_score"] == 1
    nodes = [n["node"] for n in sens["nodes"]]
    assert nodes == ["second", "first"]
    drops = [n["drop"] for n in sens["nodes"]]
    assert drops[0] > 1e-4 > drops[1] >= 0
    # The full model's drop is what the gate printed.
    assert abs(sens["quantized_drop"] - (1 - sens["quantized_score"])) < 1e-12
    r = kiln("quantize", model, "--max-collapsed", "1",
             "-o", tmp_path / "q.onnx", *npz_flags(cal), "--metric", "cosine",
             "--max-drop", "1e-4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"keeping second float32 \(its drop alone \d\.\d+\)", r.stdout), r.stdout
    assert "1 node kept float32 by the fallback: second" in r.stdout
    assert re.search(r"metric cosine: float model 1\.00000, quantized 0\.9999\d+, drop 0\.0000\d+ "
                     r"\(<= 0\.0001\)\n", r.stdout), r.stdout


def test_top1_and_max_abs_steps_metrics(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    cal = calibration_sets(tmp_path, count=4)
    r = kiln("quantize", model, "--max-collapsed", "1",
             "-o", tmp_path / "q.onnx", *npz_flags(cal), "--metric", "top1",
             "--max-drop", "0.25")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"metric top1: float model 1\.00000, quantized (\S+), drop (\S+) \(<= 0\.25\)",
                  r.stdout)
    assert m and abs(1 - float(m.group(1)) - float(m.group(2))) < 1e-9, r.stdout
    # The built-in top-1 agreement says the same (the "probs" output's, which the metric's
    # minimum over [N, classes] outputs includes).
    agree = [float(x) for x in re.findall(r"top-1 agreement (\d\.\d+)", r.stdout)]
    assert agree and float(m.group(1)) == pytest.approx(min(agree), abs=1e-4)
    r = kiln("quantize", model, "--max-collapsed", "1",
             "-o", tmp_path / "q2.onnx", *npz_flags(cal), "--metric",
             "max-abs-steps", "--max-drop", "1000")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"metric max-abs-steps: float model 0\.00000, quantized (\S+), rise", r.stdout)
    assert m and 0 < float(m.group(1)) < 255, r.stdout
    relu = outlier_model(tmp_path)
    r = kiln("quantize", relu, "--max-collapsed", "1",
             "-o", tmp_path / "q3.onnx", *npz_flags(cal[:1]), "--metric",
             "top1", "--max-drop", "0.1")
    assert r.returncode == 1 and "--metric top1 needs an output shaped [N, classes]" in r.stderr
    r = kiln("quantize", relu, "--max-collapsed", "1", "-o", tmp_path / "q3.onnx", "--metric", "f1")
    assert r.returncode == 1 and "choose cosine, top1, max-abs-steps or script:PATH" in r.stderr


SCRIPT = """import os, sys
import numpy as np
ref, cand = np.load(sys.argv[1]), np.load(sys.argv[2])
with open(os.environ["METRIC_LOG"], "a") as log:
    log.write(" ".join(f"{k}:{ref[k].shape}:{cand[k].shape}" for k in sorted(ref.files)) + "\\n")
print("the script may print anything before its score")
print(-float(np.abs(ref["y"] - cand["y"]).mean()))
"""


def test_script_metric_protocol_and_bad_scripts(kiln, tmp_path):
    """script:PATH gets REFERENCE.npz and CANDIDATE.npz (each output, the sets concatenated along
    the first axis), once with the reference as the candidate; it prints the score last. Scripts
    that crash, die, print garbage or hang are clear errors."""
    import os
    model = outlier_model(tmp_path)  # --max-collapsed 1: past the collapse trap, for the gate
    cal = calibration_sets(tmp_path, count=2)
    script = tmp_path / "metric.py"
    script.write_text(SCRIPT)
    log = tmp_path / "metric.log"
    env = dict(os.environ, METRIC_LOG=str(log))
    r = kiln("quantize", model, "--max-collapsed", "1",
             "-o", tmp_path / "q.onnx", *npz_flags(cal), "--metric",
             f"script:{script}", "--max-drop", "1", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"metric script:\S+: float model -?0\.00000, quantized -(\S+), drop (\S+) "
                  r"\(<= 1\)", r.stdout)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) == pytest.approx(float(m.group(1))), \
        r.stdout
    calls = log.read_text().splitlines()
    assert calls == ["y:(8, 8, 16, 16):(8, 8, 16, 16)"] * 2  # the reference's score, then the model's
    bad = {"crash": ("raise ZeroDivisionError('no')", "exited with status 1; its stderr: "),
           "garbage": ("print('accuracy: high')", "its last line was 'accuracy: high'"),
           "silent": ("pass", "its last line was ''"),
           "nan": ("print('nan')", "must print its score (a finite number)"),
           "killed": ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
                      "died of signal 11"),
           "hang": ("import time; time.sleep(60)", "ran past its time limit of 1 s "
                    "(--metric-timeout) and was stopped")}
    for name, (body, message) in bad.items():
        path = tmp_path / f"{name}.py"
        path.write_text(body + "\n")
        out = tmp_path / f"{name}.onnx"
        r = kiln("quantize", model, "--max-collapsed", "1",
                 "-o", out, *npz_flags(cal), "--metric", f"script:{path}",
                 "--max-drop", "1", "--metric-timeout", "1")
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        assert f"the metric script '{path}'" in r.stderr and message in r.stderr, (name, r.stderr)
        assert not out.exists()
    r = kiln("quantize", model, "--max-collapsed", "1", "-o", tmp_path / "x.onnx", "--metric",
             f"script:{tmp_path / 'missing.py'}")
    assert r.returncode == 1 and "no such file" in r.stderr


def test_verify_takes_the_task_metric(kiln, tmp_path):
    """kiln verify QUANTIZED --onnx FLOAT --metric M --max-drop X: the quantized model against
    the float one on the task metric instead of the tolerance."""
    model = small_cnn(tmp_path / "cnn.onnx")
    q = tmp_path / "q.onnx"
    assert kiln("quantize", model, "-o", q, *npz_flags(calibration_sets(tmp_path))).returncode == 0
    base = ["verify", q, "--onnx", model, "--reference", "interpreter", "--dim", "batch=16"]
    r = kiln(*base, "--metric", "top1", "--max-drop", "0.5")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"metric top1 against the reference interpreter: reference 1\.00000, candidate "
                  r"(\S+), drop (\S+) \(<= 0\.5\) PASS", r.stdout)
    assert m and float(m.group(1)) >= 0.5, r.stdout
    assert "verify: PASS: 2 outputs within --max-drop 0.5 of the metric" in r.stdout
    # The quantized model is not the float one: no drop at all is too much for cosine.
    r = kiln(*base, "--max-drop", "0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"metric cosine against the reference interpreter: reference 1\.00000, "
                     r"candidate 0\.99\d+, drop 0\.0\d+ \(<= 0\) FAIL", r.stdout), r.stdout
    assert "verify: FAIL: the metric drops past --max-drop from the reference interpreter" in r.stdout
    # --metric alone: reported beside the tolerance's verdict.
    r = kiln(*base, "--metric", "max-abs-steps")
    assert re.search(r"metric max-abs-steps against the reference interpreter: reference "
                     r"0\.00000, candidate \S+, rise \S+\n", r.stdout), r.stdout
