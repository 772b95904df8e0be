"""kiln compile --fp16: a small CNN and a small transformer encoder compiled to float16 engines,
checked against onnxruntime in float32 within the documented tolerance (docs/FP16.md), engines
about half the size, the precision shown by inspect, the gate and its flags."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_transformer_model

FP16_MAX_REL_L2 = 1e-2  # kiln's default gate limit for --fp16 (cli/fp16.hpp)


def write_tensor(path, array, name):
    t = numpy_helper.from_array(array, name)
    path.write_bytes(t.SerializeToString())


def read_output(path):
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(proto)


def rel_l2(a, e):
    a = a.astype(np.float64)
    e = e.astype(np.float64)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


def small_cnn(path, seed=0):
    """Conv-BN-Relu x2, a residual Add, MaxPool, global pooling, Gemm: ~60k float32 weights, so
    the weights dominate the engine file."""
    rng = np.random.default_rng(seed)

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [w("c1_w", 32, 3, 3, 3), w("c1_b", 32), w("c2_w", 32, 32, 3, 3, scale=0.06),
             w("c2_b", 32), w("c3_w", 64, 32, 3, 3, scale=0.06), w("c3_b", 64),
             w("fc_w", 10, 64, scale=0.1), w("fc_b", 10)]
    inits += [numpy_helper.from_array(np.abs(rng.standard_normal(32)).astype(np.float32) + 0.5,
                                      "bn_var"),
              w("bn_scale", 32), w("bn_bias", 32), w("bn_mean", 32)]
    nodes = [
        helper.make_node("Conv", ["image", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                         ["bn"]),
        helper.make_node("Add", ["bn", "r1"], ["res"]),
        helper.make_node("Relu", ["res"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "c3_w", "c3_b"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def run_engine(kiln, engine, feeds, out_dir, tmp_path):
    args = []
    for name, array in feeds.items():
        write_tensor(tmp_path / f"{name}.pb", array, name)
        args += ["--input", f"{name}={tmp_path / (name + '.pb')}"]
    r = kiln("run", engine, *args, "--output-dir", out_dir)
    assert r.returncode == 0, r.stderr
    return r


def compile_both(kiln, model, tmp_path, *extra):
    sizes = {}
    # Sizes compare the weights as the model has them: --no-prepack leaves out the float32
    # engine's second, packed copy of its convolution weights (float16 ones have none).
    for tag, flags in (("fp32", ["--no-prepack"]), ("fp16", ["--fp16"])):
        engine = tmp_path / f"m_{tag}.kiln"
        r = kiln("compile", model, "-o", engine, *flags, *extra)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "precision gate: PASS" in r.stdout
        sizes[tag] = engine.stat().st_size
        if tag == "fp16":
            assert re.search(r"^fp16: \d+ of \d+ float nodes compute in float16", r.stdout, re.M)
            assert f"relative L2 <= {FP16_MAX_REL_L2:.1e}" in r.stdout
    return sizes


def test_fp16_cnn_matches_onnxruntime_and_halves_the_engine(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    sizes = compile_both(kiln, model, tmp_path, "--shape-range", "image:1..4x3x16x16")
    assert 0.45 < sizes["fp16"] / sizes["fp32"] < 0.6, sizes
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    expected = dict(zip(["logits", "probs"],
                        ort.InferenceSession(str(model)).run(None, {"image": x})))
    run_engine(kiln, tmp_path / "m_fp16.kiln", {"image": x}, tmp_path / "out", tmp_path)
    for name, e in expected.items():
        ours = read_output(tmp_path / "out" / f"{name}.pb")
        assert ours.dtype == np.float32  # inputs and outputs keep float32 by default
        err = rel_l2(ours, e)
        assert err < FP16_MAX_REL_L2, (name, err)
        # Really float16 arithmetic: not bit-equal to float32.
        assert err > 1e-6, (name, err)


def test_fp16_transformer_matches_onnxruntime(kiln, tmp_path):
    model = tmp_path / "encoder.onnx"
    make_transformer_model.build(str(model), layers=2, hidden=64, heads=4)
    sizes = compile_both(kiln, model, tmp_path, "--shape-range", "x:1..2x1..16x64",
                         "--shape-range", "mask:1..2x1x1x1..16")
    assert 0.45 < sizes["fp16"] / sizes["fp32"] < 0.65, sizes
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 9, 64)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 9), np.float32)
    mask[1, ..., 6:] = -10000.0  # padding of the second sequence
    expected = ort.InferenceSession(str(model)).run(None, {"x": x, "mask": mask})[0]
    run_engine(kiln, tmp_path / "m_fp16.kiln", {"x": x, "mask": mask}, tmp_path / "out", tmp_path)
    ours = read_output(tmp_path / "out" / "hidden.pb")
    assert ours.dtype == np.float32
    assert rel_l2(ours, expected) < FP16_MAX_REL_L2


def test_inspect_shows_precision_and_fp16_io_flag(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    r = kiln("inspect", model)
    assert "precision: float32 (0 of" in r.stdout
    assert kiln("compile", model, "-o", tmp_path / "a.kiln", "--fp16").returncode == 0
    r = kiln("inspect", tmp_path / "a.kiln")
    assert r.returncode == 0, r.stderr
    assert re.search(r"precision: float16 \(\d+ of \d+ float nodes compute in float16; float "
                     r"weights: [0-9.]+ [KM]iB float16\)", r.stdout), r.stdout
    assert re.search(r"image: float\[", r.stdout)
    r = kiln("compile", model, "-o", tmp_path / "b.kiln", "--fp16", "--fp16-io")
    assert r.returncode == 0, r.stderr
    r = kiln("inspect", tmp_path / "b.kiln")
    assert re.search(r"image: float16\[", r.stdout) and re.search(r"probs: float16\[", r.stdout)
    # --fp16-keep-op leaves an op float32: here the Gemm, so its weights stay float32.
    r = kiln("compile", model, "-o", tmp_path / "c.kiln", "--fp16", "--fp16-keep-op", "Gemm")
    assert r.returncode == 0, r.stderr
    r = kiln("inspect", tmp_path / "c.kiln")
    assert "precision: mixed float16/float32" in r.stdout
    assert re.search(r"weights: [0-9.]+ KiB float32, [0-9.]+ KiB float16", r.stdout), r.stdout
    # The fp16 flags need --fp16.
    assert kiln("compile", model, "-o", tmp_path / "d.kiln", "--fp16-io").returncode == 2


def test_fp16_gate_names_the_first_drifting_node(kiln, demo, tmp_path):
    engine = tmp_path / "d.kiln"
    r = kiln("compile", demo, "-o", engine, "--fp16", env={"KILN_TEST_CORRUPT_WEIGHT": "conv_w"})
    assert r.returncode == 1
    assert "precision gate: output 'probs' drifts" in r.stderr
    line = re.search(r"first drifting node: (.*)", r.stderr).group(1)
    assert line.startswith("Conv #0") or "may start earlier, in Conv #0" in line, line
    assert not engine.exists()
    # The tolerance flag overrides the fp16 default both ways.
    r = kiln("compile", demo, "-o", engine, "--fp16", "--max-rel-l2", "1e-7")
    assert r.returncode == 1 and "drifts" in r.stderr
    r = kiln("compile", demo, "-o", engine, "--fp16", "--max-rel-l2", "0.5",
             env={"KILN_TEST_CORRUPT_WEIGHT": "conv_w"})
    assert r.returncode == 0, r.stderr


def test_verify_holds_an_fp16_engine_to_the_fp16_limit(kiln, demo, tmp_path):
    engine = tmp_path / "d.kiln"
    assert kiln("compile", demo, "-o", engine, "--fp16").returncode == 0
    r = kiln("verify", engine, "--reference", "interpreter")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"relative L2 <= {FP16_MAX_REL_L2:.1e}" in r.stdout


def test_verify_takes_an_fp16_io_engine(kiln, demo, tmp_path):
    """Float16 inputs and outputs: verify widens the feeds for the float32 original and
    compares in its types, against both references."""
    engine = tmp_path / "io.kiln"
    assert kiln("compile", demo, "-o", engine, "--fp16", "--fp16-io").returncode == 0
    r = kiln("verify", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "image: float16[" in r.stdout
    assert len(re.findall(r"probs .* PASS", r.stdout)) == 2, r.stdout


def test_out_of_range_weight_is_clamped_with_a_warning(kiln, tmp_path):
    nodes = [helper.make_node("Mul", ["x", "big"], ["y"])]
    big = numpy_helper.from_array(np.array([1e6, 2.0], np.float32), "big")
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializer=[big])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    # Without the range check (which would keep this Mul, whose output reaches 1e6, float32).
    r = kiln("compile", path, "-o", tmp_path / "big.kiln", "--fp16", "--allow-drift",
             "--fp16-no-range-check")
    assert r.returncode == 0, r.stderr
    assert "initializer 'big': 1 of 2 values beyond the float16 range" in r.stderr
    assert "1 initializers clamped" in r.stdout


def test_activations_beyond_float16_stay_float32(kiln, tmp_path):
    """x * 300 * 300 reaches 9e4, past float16's 65504: converted as it is the engine computes
    infinities and the gate refuses it; the default range check keeps the nodes around that value
    in float32, and the engine matches onnxruntime."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Mul", ["a", "k"], ["b"]),
             helper.make_node("Mul", ["b", "small"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    inits = [numpy_helper.from_array(np.array(300.0, np.float32), "k"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "small")]
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], initializer=inits)
    path = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = kiln("compile", path, "-o", tmp_path / "plain.kiln", "--fp16", "--fp16-no-range-check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert not (tmp_path / "plain.kiln").exists()
    r = kiln("compile", path, "-o", tmp_path / "wide.kiln", "--fp16")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "precision gate: PASS" in r.stdout
    assert re.search(r"fp16: range check: 1 float32 value reaches 16376 or more", r.stderr), r.stderr
    assert re.search(r"\d+ nodes kept float32 for their range", r.stdout), r.stdout
    assert "precision: mixed float16/float32" in kiln("inspect", tmp_path / "wide.kiln").stdout
    x = np.random.default_rng(3).uniform(-1, 1, 64).astype(np.float32)
    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    run_engine(kiln, tmp_path / "wide.kiln", {"x": x}, tmp_path / "out", tmp_path)
    ours = read_output(tmp_path / "out" / "y.pb")
    assert np.isfinite(ours).all()
    assert rel_l2(ours, expected) < FP16_MAX_REL_L2


@pytest.mark.parametrize("flag", ["--fp16"])
def test_compile_help_documents_fp16(kiln, flag):
    r = kiln("compile", "--help")
    assert flag in r.stdout and "--fp16-io" in r.stdout and "--fp16-keep-op" in r.stdout


def test_attention_mask_sentinels_do_not_keep_float32(kiln, tmp_path):
    """HF's additive mask, (1 - mask) * finfo(float32).min: its -3.4e38 are "minus infinity"
    sentinels, not activations past float16's range; the range check leaves them to the
    constant's clamp (-65504), so the whole model computes in float16 and still matches."""
    nodes = [helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "fmin"], ["bias"]),
             helper.make_node("Unsqueeze", ["bias", "axis"], ["b3"]),
             helper.make_node("Add", ["x", "b3"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "fmin"),
             numpy_helper.from_array(np.array([1], np.int64), "axis")]
    g = helper.make_graph(nodes, "mask",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8]),
                           helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], inits)
    path = tmp_path / "mask.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = kiln("compile", path, "-o", tmp_path / "mask.kiln", "--fp16")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fp16: range check: every float32 value stays within float16's range" in r.stdout
    assert "kept float32 for their range" not in r.stdout
    assert "precision: float16 (" in r.stdout
