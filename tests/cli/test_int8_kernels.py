"""Static INT8 QDQ models through the kiln command: the QDQ patterns fold into int8 nodes that run
on oneDNN's int8 kernels (`kiln profile` names them), the engine keeps them, and `kiln compile`'s
gate passes them at its int8 tolerance. Numerics against the reference path are in
tests/python/test_int8_kernels.py."""
import re

import make_qdq_models as qdq


def node_kernels(stdout):
    """op type -> set of kernels from `kiln profile`'s node table."""
    table = stdout.split("\nnode ", 1)[1].split("\n\n", 1)[0]
    kernels = {}
    for line in table.splitlines()[1:]:
        m = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)\s+([\d.]+)\s+[\d.]+%", line)
        if m:
            kernels.setdefault(m.group(2), set()).add(m.group(3))
    return kernels


def test_profile_shows_the_int8_kernels(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    r = kiln("profile", model, "--iterations", 2)
    assert r.returncode == 0, r.stderr
    kernels = node_kernels(r.stdout)
    assert kernels.get("FusedQLinearConv") == {"cpu:onednn.qlinear_conv"}, r.stdout
    assert kernels.get("QuantizeLinear") == {"cpu:cpu.quantize_linear"}, r.stdout
    assert not any("reference" in k for ks in kernels.values() for k in ks), r.stdout
    assert "Conv" not in kernels and "DequantizeLinear" not in kernels, r.stdout

    gemm = qdq.gemm(tmp_path / "gemm.onnx")
    r = kiln("profile", gemm, "--iterations", 2)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("FusedQLinearMatMul") == {"cpu:onednn.qlinear_matmul"}


def test_unoptimized_runs_the_reference_path(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    r = kiln("profile", model, "--no-optimize", "--iterations", 1)
    assert r.returncode == 0, r.stderr
    kernels = node_kernels(r.stdout)
    assert "FusedQLinearConv" not in kernels and "Conv" in kernels, r.stdout


def test_engine_keeps_the_int8_nodes_and_passes_the_gate(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    engine = tmp_path / "chain.kiln"
    r = kiln("compile", model, "-o", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "int8 nodes" in r.stdout and "precision gate: pass" in r.stdout.lower(), r.stdout
    ops = kiln("inspect", engine).stdout
    assert re.search(r"ai\.kiln\.FusedQLinearConv +3\b", ops), ops
    r = kiln("profile", engine, "--iterations", 1)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("FusedQLinearConv") == {"cpu:onednn.qlinear_conv"}


def test_engine_stores_the_int8_weights_packed_once(kiln, tmp_path):
    """`kiln compile` stores the int8 convolutions' weights in oneDNN's layout and, as they decode
    back to the constants, only that way (no plain copy); the engine opens on those bytes and
    computes exactly what Kiln computes from the ONNX file."""
    import numpy as np
    from test_fp16 import read_output, run_engine

    model = qdq.chain(tmp_path / "chain.onnx")
    engine = tmp_path / "chain.kiln"
    r = kiln("compile", model, "-o", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    packed = re.search(r"^packed weights: (\d+)", r.stdout, re.M)
    once = re.search(r"^stored once: (\d+) of the packed weights", r.stdout, re.M)
    assert packed and once and int(once.group(1)) >= 2, r.stdout
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
    outs = []
    for i, source in enumerate((engine, model)):
        run_engine(kiln, source, {"x": x}, tmp_path / f"out{i}", tmp_path)
        outs.append(read_output(next((tmp_path / f"out{i}").glob("*.pb"))))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_weight_zero_points_beyond_int8_run_on_the_int8_kernels(kiln, tmp_path):
    # Weights quantized to [-127, 127] with zero point 2 (w - 2 reaches -129), and uint8
    # weights over 0..255 with zero points (onnxruntime's QUInt8): the kernels widen their
    # products and correct them (numerics in tests/python/test_int8_kernels.py).
    import numpy as np
    import onnx
    from onnx import numpy_helper

    conv = qdq.conv(tmp_path / "conv.onnx", w_zero=2)
    gemm = qdq.gemm(tmp_path / "gemm.onnx")
    m = onnx.load(gemm)
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0].startswith("w"):
            w, z = (inits[n.input[k]] for k in (0, 2))
            q = numpy_helper.to_array(w).astype(np.int16) + 128
            w.CopyFrom(numpy_helper.from_array(q.astype(np.uint8), w.name))
            zero = np.full(numpy_helper.to_array(z).shape, 90, np.uint8)
            z.CopyFrom(numpy_helper.from_array(zero, z.name))
    onnx.save(m, gemm)
    for model, op, kernel in ((conv, "FusedQLinearConv", "cpu:onednn.qlinear_conv"),
                              (gemm, "FusedQLinearMatMul", "cpu:onednn.qlinear_matmul")):
        r = kiln("profile", model, "--iterations", 1)
        assert r.returncode == 0, r.stderr
        kernels = node_kernels(r.stdout)
        assert kernels.get(op) == {kernel}, r.stdout
        assert "Conv" not in kernels and "Gemm" not in kernels, r.stdout


def test_conv_integer_runs_on_the_int8_convolution(kiln, tmp_path):
    # ONNX ConvInteger with a constant uint8 weight (as onnxruntime's quantize_dynamic writes).
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.integers(60, 200, (8, 4, 3, 3)).astype(np.uint8), "w")
    wz = numpy_helper.from_array(np.uint8(128), "wz")
    xz = numpy_helper.from_array(np.uint8(100), "xz")
    g = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
        "conv_integer", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 6, 6])], [w, wz, xz])
    model = tmp_path / "conv_integer.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
    r = kiln("profile", model, "--iterations", 1)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("ConvInteger") == {"cpu:onednn.qlinear_conv"}, r.stdout


def test_dynamic_conv_integer_takes_its_zero_point_at_run_time(kiln, tmp_path):
    # onnxruntime's quantize_dynamic (int8 weights): DynamicQuantizeLinear computes x's zero
    # point in the run; the int8 convolution takes it with each run.
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [w])
    src, dst = tmp_path / "conv.onnx", tmp_path / "conv_dynamic.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    quantize_dynamic(str(src), str(dst), op_types_to_quantize=["Conv"],
                     weight_type=QuantType.QInt8)
    r = kiln("profile", dst, "--iterations", 1)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("ConvInteger") == {"cpu:onednn.qlinear_conv"}, r.stdout
    r = kiln("verify", dst)
    assert r.returncode == 0, r.stdout + r.stderr
