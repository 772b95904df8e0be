"""kiln compile --bf16: the fp16 tests' small CNN and transformer encoder compiled to bfloat16
engines on a CPU with bfloat16 instructions: within the bf16 limit of onnxruntime's float32
results but not bit-equal (really bfloat16 arithmetic), convolutions and matrix products on
oneDNN's bfloat16 kernels (not the widening twin), engines about half the size, the precision
shown by inspect and held by verify. On a CPU without them, the refusal names the reason."""
import re

import numpy as np
import onnxruntime as ort
import pytest

import make_transformer_model
from test_fp16 import read_output, rel_l2, run_engine, small_cnn

BF16_MAX_REL_L2 = 5e-2  # kiln's default gate limit for --bf16 (compiler/fp16.hpp)


def cpu_has_bf16():
    flags = open("/proc/cpuinfo").read()
    return " avx512_bf16" in flags or " amx_bf16" in flags


needs_bf16 = pytest.mark.skipif(not cpu_has_bf16(),
                                reason="this CPU has no AVX512_BF16 / AMX: --bf16 is refused")


def kernels_of(kiln, engine, tmp_path, feeds):
    """The kernel each node ran on, from `kiln profile`'s trace."""
    import json

    args = []
    for name, array in feeds.items():
        from test_fp16 import write_tensor

        write_tensor(tmp_path / f"p_{name}.pb", array, name)
        args += ["--input", f"{name}={tmp_path / ('p_' + name + '.pb')}"]
    trace = tmp_path / "trace.json"
    r = kiln("profile", engine, *args, "--iterations", "2", "--warmup", "1", "--trace", trace)
    assert r.returncode == 0, r.stderr
    kernels = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "run":
            args_ = e.get("args", {})
            kernels[e["name"]] = (args_.get("op_type", ""), args_.get("kernel", ""))
    return kernels


@needs_bf16
def test_bf16_cnn_runs_bf16_kernels_within_the_limit(kiln, tmp_path):
    model = small_cnn(tmp_path / "cnn.onnx")
    sizes = {}
    for tag, flags in (("fp32", ["--no-prepack"]), ("bf16", ["--bf16"])):
        engine = tmp_path / f"m_{tag}.kiln"
        r = kiln("compile", model, "-o", engine, "--shape-range", "image:1..4x3x16x16", *flags)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "precision gate: PASS" in r.stdout
        sizes[tag] = engine.stat().st_size
    assert re.search(r"^bf16: \d+ of \d+ float nodes compute in bfloat16", r.stdout, re.M), r.stdout
    assert f"relative L2 <= {BF16_MAX_REL_L2:.1e}" in r.stdout
    assert 0.45 < sizes["bf16"] / sizes["fp32"] < 0.6, sizes
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    expected = dict(zip(["logits", "probs"],
                        ort.InferenceSession(str(model)).run(None, {"image": x})))
    run_engine(kiln, tmp_path / "m_bf16.kiln", {"image": x}, tmp_path / "out", tmp_path)
    for name, e in expected.items():
        ours = read_output(tmp_path / "out" / f"{name}.pb")
        assert ours.dtype == np.float32
        err = rel_l2(ours, e)
        assert 1e-5 < err < BF16_MAX_REL_L2, (name, err)
    kernels = kernels_of(kiln, tmp_path / "m_bf16.kiln", tmp_path, {"image": x})
    compute = [k for op, k in kernels.values() if op in ("Conv", "FusedConv", "Gemm", "FusedGemm")]
    assert compute and all(k in ("onednn.conv", "onednn.gemm") for k in compute), kernels
    # The residual Add (and its Relu) joins its convolution (oneDNN's sum post-op in bfloat16);
    # element-wise nodes left run the bfloat16 kernels, not the widening twin.
    ops = [op for op, _ in kernels.values()]
    assert "Add" not in ops, kernels
    joins = [k for op, k in kernels.values() if op in ("Add", "Relu", "Mul", "Sub")]
    assert all(k == "cpu.bf16_eltwise" for k in joins), kernels


@needs_bf16
def test_bf16_eltwise_runs_the_adds_and_relus_convolutions_cannot_take(kiln, tmp_path):
    """Two activated convolutions summed (no residual to fuse: each has its Relu), then Relu and
    Mul: the element-wise nodes on the bfloat16 kernels, not the widening twin."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(3)
    w = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.2).astype(np.float32),
                                 f"w{i}") for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Add", ["r0", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Mul", ["r", "r0"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], w)
    model = tmp_path / "sum.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    engine = tmp_path / "sum.kiln"
    r = kiln("compile", model, "-o", engine, "--bf16")
    assert r.returncode == 0, r.stdout + r.stderr
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    kernels = kernels_of(kiln, engine, tmp_path, {"x": x})
    joins = [k for op, k in kernels.values() if op in ("Add", "Relu", "Mul")]
    assert len(joins) == 3 and all(k == "cpu.bf16_eltwise" for k in joins), kernels


@needs_bf16
def test_bf16_transformer_matches_onnxruntime(kiln, tmp_path):
    model = tmp_path / "encoder.onnx"
    make_transformer_model.build(str(model), layers=2, hidden=64, heads=4)
    engine = tmp_path / "enc.kiln"
    r = kiln("compile", model, "-o", engine, "--bf16", "--shape-range", "x:1..2x1..16x64",
             "--shape-range", "mask:1..2x1x1x1..16")
    assert r.returncode == 0, r.stdout + r.stderr
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 9, 64)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 9), np.float32)
    mask[1, ..., 6:] = -10000.0
    expected = ort.InferenceSession(str(model)).run(None, {"x": x, "mask": mask})[0]
    run_engine(kiln, engine, {"x": x, "mask": mask}, tmp_path / "out", tmp_path)
    err = rel_l2(read_output(tmp_path / "out" / "hidden.pb"), expected)
    assert 1e-5 < err < BF16_MAX_REL_L2, err
    kernels = kernels_of(kiln, engine, tmp_path, {"x": x, "mask": mask})
    products = [k for op, k in kernels.values() if op in ("MatMul", "FusedMatMul")]
    assert products and all(k == "onednn.matmul" for k in products), kernels


@needs_bf16
def test_bf16_inspect_verify_and_flags(kiln, demo, tmp_path):
    engine = tmp_path / "d.kiln"
    assert kiln("compile", demo, "-o", engine, "--bf16").returncode == 0
    r = kiln("inspect", engine)
    assert re.search(r"precision: bfloat16 \(\d+ of \d+ float nodes compute in bfloat16; float "
                     r"weights: [0-9.]+ [KM]iB bfloat16\)", r.stdout), r.stdout
    r = kiln("verify", engine, "--reference", "interpreter")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"relative L2 <= {BF16_MAX_REL_L2:.1e}" in r.stdout
    # --bf16 and --fp16 exclude each other; --bf16-keep-op needs --bf16.
    assert kiln("compile", demo, "-o", tmp_path / "x.kiln", "--bf16", "--fp16").returncode == 2
    assert kiln("compile", demo, "-o", tmp_path / "y.kiln", "--bf16-keep-op", "Conv").returncode == 2
    r = kiln("compile", demo, "-o", tmp_path / "z.kiln", "--bf16", "--bf16-keep-op", "FusedConv")
    assert r.returncode == 0, r.stderr
    assert "precision: mixed bfloat16/float32" in kiln("inspect", tmp_path / "z.kiln").stdout


@pytest.mark.skipif(cpu_has_bf16(), reason="this CPU has bfloat16 instructions")
def test_bf16_is_refused_without_bf16_instructions(kiln, demo, tmp_path):
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--bf16")
    assert r.returncode != 0
    assert "no bfloat16 instructions" in r.stderr


@needs_bf16
def test_bf16_squeeze_excitation_runs_bfloat16_kernels(kiln, tmp_path):
    """EfficientNet's block in bfloat16: a SiLU convolution (Kiln's SiLU pass over the bfloat16
    result), global pooling of its blocked output, the per-channel Mul scaling it, and the same
    per-channel forms on a row-major graph input (24 channels: a padded last block), all on
    bfloat16 kernels, within the bf16 limit of onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(4)
    c = 24
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32),
                                     "w"),
             numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32),
                                     "w_se")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["c_sig"]),
             helper.make_node("Mul", ["c", "c_sig"], ["a"]),  # SiLU
             helper.make_node("GlobalAveragePool", ["a"], ["p"]),
             helper.make_node("Conv", ["p", "w_se"], ["q"]),
             helper.make_node("Sigmoid", ["q"], ["s"]),
             helper.make_node("Mul", ["a", "s"], ["y"]),
             helper.make_node("GlobalMaxPool", ["a"], ["m"]),
             helper.make_node("GlobalAveragePool", ["x"], ["px"]),
             helper.make_node("Sigmoid", ["px"], ["sx"]),
             helper.make_node("Sub", ["sx", "x"], ["z"])]  # per channel, swapped, row-major
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 9, 9]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, c, 1, 1]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, c, 9, 9])], inits)
    model = tmp_path / "se.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    engine = tmp_path / "se.kiln"
    r = kiln("compile", model, "-o", engine, "--bf16")
    assert r.returncode == 0, r.stdout + r.stderr
    x = rng.standard_normal((2, c, 9, 9)).astype(np.float32)
    expected = dict(zip(["y", "m", "z"], ort.InferenceSession(str(model)).run(None, {"x": x})))
    run_engine(kiln, engine, {"x": x}, tmp_path / "out", tmp_path)
    for name, e in expected.items():
        err = rel_l2(read_output(tmp_path / "out" / f"{name}.pb"), e)
        assert err < BF16_MAX_REL_L2, (name, err)
    kernels = kernels_of(kiln, engine, tmp_path, {"x": x})
    pools = [k for op, k in kernels.values() if op.startswith("Global")]
    assert len(pools) == 3 and all(k == "cpu.global_pool" for k in pools), kernels
    scales = [k for op, k in kernels.values() if op in ("Mul", "Sub")]
    assert len(scales) == 2 and all(k == "cpu.bf16_eltwise" for k in scales), kernels
