"""kiln quantize --int4: MatMul / Gemm weights as com.microsoft MatMulNBits. Kiln's reference
and CPU kernels run a model made by onnxruntime's own MatMulNBitsQuantizer as onnxruntime does;
Kiln's own file opens in onnxruntime, runs in Kiln (ONNX and compiled engine) as there, stays
close to the float model and is not worse than onnxruntime's quantizer at the same settings;
GPTQ beats round to nearest on held-out data; Gemm's transB, alpha, beta and C are folded
correctly or the node is left alone with the reason."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_fp16 import read_output, write_tensor
from test_quantize import cosine, npz_flags


def ort_quantizer():
    """onnxruntime's MatMulNBitsQuantizer (MatMul4BitsQuantizer before 1.18), or skip saying
    why it cannot be had."""
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        return MatMulNBitsQuantizer
    except ImportError as e:
        try:
            from onnxruntime.quantization.matmul_4bits_quantizer import MatMul4BitsQuantizer
            return MatMul4BitsQuantizer
        except ImportError:
            pytest.skip(f"onnxruntime {ort.__version__} has no usable MatMulNBitsQuantizer / "
                        f"MatMul4BitsQuantizer: {e}")


def ort_int4(model_path, out_path, block_size, symmetric):
    q = ort_quantizer()(onnx.load(str(model_path)), block_size=block_size,
                        is_symmetric=symmetric)
    q.process()
    onnx.save(q.model.model, str(out_path))
    return out_path


def kiln_run(kiln, tmp_path, model, feeds, tag):
    args = []
    for name, value in feeds.items():
        write_tensor(tmp_path / f"{tag}_{name}.pb", value, name)
        args += ["--input", f"{name}={tmp_path / f'{tag}_{name}.pb'}"]
    r = kiln("run", model, *args, "--output-dir", tmp_path / tag)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def mlp(path, k=96, hidden=80, n=24, seed=0):
    """x [b, s, k] -> MatMul -> Add -> Relu -> MatMul: batch dims and a K that is not a multiple of
    every block size."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((k, hidden)).astype(np.float32) * 0.2,
                                     "w1"),
             numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((hidden, n)).astype(np.float32) * 0.2,
                                     "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["b", "s", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", n])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("block,symmetric", [(32, False), (16, True), (128, False), (64, True)])
def test_quantize_int4_kiln_runs_onnxruntimes_matmulnbits_model_as_it_does(kiln, tmp_path, block,
                                                                           symmetric):
    model = mlp(tmp_path / "mlp.onnx", k=100, hidden=72)
    theirs = ort_int4(model, tmp_path / "ort.onnx", block, symmetric)
    ops = [n.op_type for n in onnx.load(str(theirs)).graph.node]
    assert ops.count("MatMulNBits") == 2
    x = np.random.default_rng(1).standard_normal((2, 7, 100)).astype(np.float32)
    want = ort.InferenceSession(str(theirs)).run(None, {"x": x})[0]
    # On the CPU kernel (cpu.matmul_nbits; the unit tests hold it to the reference kernel).
    r = kiln_run(kiln, tmp_path, theirs, {"x": x}, "o")
    got = read_output(tmp_path / "o" / "y.pb")
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() + 1e-6


def test_quantize_int4_file_opens_in_onnxruntime_runs_in_kiln_and_matches_its_quantizer(
        kiln, tmp_path):
    import make_transformer_model

    model = tmp_path / "enc.onnx"
    make_transformer_model.build(str(model), layers=2, hidden=64, heads=4)
    rng = np.random.default_rng(0)
    cal = []
    for i in range(3):
        cal.append(tmp_path / f"e{i}.npz")
        np.savez(cal[-1], x=rng.standard_normal((2, 16, 64)).astype(np.float32),
                 mask=np.zeros((2, 1, 1, 16), np.float32))
    out = tmp_path / "enc.int4.onnx"
    # Random weights lose more to 4 bits than trained ones (MiniLM: bench/results/*int4*).
    r = kiln("quantize", model, "-o", out, "--int4", *npz_flags(cal), "--min-cosine", "0.9",
             "--fallback-nodes", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"12 of the model's \d+ nodes quantized \(12 int4 weights as MatMulNBits, "
                  r"block 32, asymmetric, round to nearest: ([\d.]+) -> ([\d.]+) MiB\)", r.stdout)
    assert m, r.stdout
    q = onnx.load(str(out))
    onnx.checker.check_model(q)
    assert {o.domain: o.version for o in q.opset_import}.get("com.microsoft") == 1
    nbits = [n for n in q.graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 12 and all(n.domain == "com.microsoft" for n in nbits)
    weights = {n.input[1] for n in onnx.load(str(model)).graph.node if n.op_type == "MatMul"}
    assert not weights & {i.name for i in q.graph.initializer}  # the float weights are gone
    assert out.stat().st_size < model.stat().st_size / 4

    x = rng.standard_normal((3, 16, 64)).astype(np.float32)
    mask = np.zeros((3, 1, 1, 16), np.float32)
    mask[2, ..., 10:] = -10000.0
    feeds = {"x": x, "mask": mask}
    want = ort.InferenceSession(str(model)).run(None, feeds)[0]
    ours = ort.InferenceSession(str(out)).run(None, feeds)[0]
    assert cosine(ours, want) > 0.9
    kiln_run(kiln, tmp_path, out, feeds, "onnx")
    mine = read_output(tmp_path / "onnx" / "hidden.pb")
    assert np.abs(mine - ours).max() <= 1e-4 * np.abs(ours).max()
    # Compiled to an engine, it runs the same.
    engine = tmp_path / "enc.int4.kiln"
    r = kiln("compile", out, "-o", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    kiln_run(kiln, tmp_path, engine, feeds, "engine")
    assert np.abs(read_output(tmp_path / "engine" / "hidden.pb") - ours).max() <= \
        1e-4 * np.abs(ours).max()
    # onnxruntime's quantizer at the same settings (block 32, asymmetric).
    theirs = ort.InferenceSession(str(ort_int4(model, tmp_path / "ort.onnx", 32, False))).run(
        None, feeds)[0]
    assert cosine(ours, want) >= cosine(theirs, want) - 1e-3


def test_quantize_int4_gptq_beats_round_to_nearest_on_held_out_data(kiln, tmp_path):
    import make_transformer_model

    model = tmp_path / "enc.onnx"
    make_transformer_model.build(str(model), layers=2, hidden=64, heads=4)
    rng = np.random.default_rng(3)
    cal = []
    for i in range(4):
        cal.append(tmp_path / f"e{i}.npz")
        np.savez(cal[-1], x=rng.standard_normal((4, 16, 64)).astype(np.float32),
                 mask=np.zeros((4, 1, 1, 16), np.float32))
    feeds = {"x": rng.standard_normal((8, 16, 64)).astype(np.float32),
             "mask": np.zeros((8, 1, 1, 16), np.float32)}
    want = ort.InferenceSession(str(model)).run(None, feeds)[0]
    scores = {}
    for method in ("rtn", "gptq"):
        out = tmp_path / f"{method}.onnx"
        r = kiln("quantize", model, "-o", out, "--int4", "--int4-method", method, "--symmetric",
                 "--block-size", "64", *npz_flags(cal), "--allow-drift", "--fallback-nodes", "0")
        assert r.returncode == 0, r.stdout + r.stderr
        scores[method] = cosine(ort.InferenceSession(str(out)).run(None, feeds)[0], want)
    assert "GPTQ (12 of them)" in r.stdout
    assert 1 - scores["gptq"] < 0.9 * (1 - scores["rtn"]), scores


def gemm_model(path, c_shape, beta=2.0, computed_c=False):
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32), "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 40])]
    if computed_c:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, c_shape))
    elif c_shape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(np.float32),
                                             "c"))
    node = helper.make_node("Gemm", ["x", "w"] + (["c"] if c_shape is not None else []), ["y"],
                            transB=1, alpha=0.5, beta=beta, name="gemm")
    g = helper.make_graph([node], "gemm", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("c_shape,computed,beta,node", [
    ((24,), False, 2.0, "bias"), ((1, 24), False, 2.0, "bias"), (None, False, 2.0, None),
    ((7, 24), False, 2.0, "Add"), ((7, 24), True, 1.0, "Add")])
def test_quantize_int4_gemm_with_transb_alpha_beta_and_c(kiln, tmp_path, c_shape, computed, beta,
                                                         node):
    model = gemm_model(tmp_path / "gemm.onnx", c_shape, beta, computed)
    out = tmp_path / "gemm.int4.onnx"
    feeds = {"x": np.random.default_rng(6).standard_normal((7, 40)).astype(np.float32)}
    if computed:
        feeds["c"] = np.random.default_rng(7).standard_normal(c_shape).astype(np.float32)
    np.savez(tmp_path / "cal.npz", **feeds)  # 7 rows, as a [7, 24] C needs
    r = kiln("quantize", model, "-o", out, "--int4", "--min-cosine", "0.98", "--calibration-npz",
             tmp_path / "cal.npz")
    assert r.returncode == 0, r.stdout + r.stderr
    q = onnx.load(str(out))
    ops = [n.op_type for n in q.graph.node]
    assert ops == ["MatMulNBits"] + (["Add"] if node == "Add" else [])
    assert (len(q.graph.node[0].input) == 6) == (node == "bias")
    want = ort.InferenceSession(str(model)).run(None, feeds)[0]
    got = ort.InferenceSession(str(out)).run(None, feeds)[0]
    assert cosine(got, want) > 0.98
    kiln_run(kiln, tmp_path, out, feeds, "k")
    assert np.abs(read_output(tmp_path / "k" / "y.pb") - got).max() <= 1e-4 * np.abs(got).max()


def test_quantize_int4_leaves_what_it_cannot_fold_and_refuses_bad_options(kiln, tmp_path):
    model = gemm_model(tmp_path / "gemm.onnx", (7, 24), beta=2.0, computed_c=True)
    r = kiln("quantize", model, "-o", tmp_path / "o.onnx", "--int4")
    assert r.returncode != 0
    assert "left float32: gemm (Gemm's C is computed and beta is not 1)" in r.stdout
    assert "has no MatMul / Gemm (2-D weight) with a constant float32 weight" in r.stderr
    m = mlp(tmp_path / "mlp.onnx")
    r = kiln("quantize", m, "-o", tmp_path / "o.onnx", "--int4", "--dynamic")
    assert r.returncode != 0 and "--int4 (weight-only) and --dynamic are two modes" in r.stderr
    r = kiln("quantize", m, "-o", tmp_path / "o.onnx", "--int4", "--block-size", "48")
    assert r.returncode != 0 and "--block-size" in r.stderr
    r = kiln("quantize", m, "-o", tmp_path / "o.onnx", "--int4", "--int4-method", "awq")
    assert r.returncode != 0 and "--int4-method" in r.stderr
    # --exclude-node keeps a node float32. fc1's bias Add stays in the file, as onnxruntime's
    # quantizer leaves it (Kiln's compile folds it into the op's bias and the Relu after it).
    r = kiln("quantize", m, "-o", tmp_path / "o.onnx", "--int4", "--exclude-node", "fc2",
             "--min-cosine", "0.95")
    assert r.returncode == 0, r.stdout + r.stderr
    q = onnx.load(str(tmp_path / "o.onnx"))
    assert [n.op_type for n in q.graph.node] == ["MatMulNBits", "Add", "Relu", "MatMul"]
    r = kiln("compile", tmp_path / "o.onnx", "-o", tmp_path / "o.kiln")
    assert r.returncode == 0, r.stdout + r.stderr
    r = kiln("inspect", tmp_path / "o.kiln")
    assert r.returncode == 0 and "FusedMatMulNBits" in r.stdout, r.stdout + r.stderr
    x = np.random.default_rng(2).standard_normal((2, 5, 96)).astype(np.float32)
    want = ort.InferenceSession(str(m)).run(None, {"x": x})[0]
    assert cosine(ort.InferenceSession(str(tmp_path / "o.onnx")).run(None, {"x": x})[0],
                  want) > 0.95


@pytest.mark.parametrize("flag", ["--int4", "--block-size", "--symmetric", "--int4-method"])
def test_quantize_int4_help_lists_its_flags(kiln, flag):
    r = kiln("quantize", "--help")
    assert r.returncode == 0 and flag in r.stdout


def nbits_model(path, k=40, n=6, block=16, bits=4, b_shape=None, scales=None, g_idx=False):
    blocks = (k + block - 1) // block
    b_shape = b_shape or [n, blocks, block * bits // 8]
    inits = [numpy_helper.from_array(np.full(b_shape, 0x88, np.uint8), "b"),
             numpy_helper.from_array(np.ones(scales or n * blocks, np.float32), "s")]
    inputs = ["x", "b", "s"]
    if g_idx:
        inits.append(numpy_helper.from_array(np.zeros(k, np.int32), "g"))
        inputs += ["", "g"]
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=block)
    g = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [3, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, n])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)]),
              str(path))
    return path


@pytest.mark.parametrize("kwargs,message", [
    ({}, None),
    ({"bits": 8}, "MatMulNBits with bits=8 is not implemented"),
    ({"block": 24}, "block_size 24 must be a power of two"),
    ({"b_shape": [6, 3, 4]}, "B is uint8[6,3,4]; K=40 N=6 block_size=16 bits=4 need uint8[6, 3, 8]"),
    ({"scales": 5}, "scales is float[5]; need 18 float values"),
    ({"g_idx": True}, "g_idx"),
    ({"k": 1 << 40, "b_shape": [6, 3, 8], "scales": 18},
     "attribute K 1099511627776 must be in [1, 2^31)"),
])
def test_quantize_int4_malformed_matmulnbits_models_are_clear_errors(kiln, tmp_path, kwargs,
                                                                     message):
    model = nbits_model(tmp_path / "m.onnx", **kwargs)
    r = kiln("run", model)
    if message is None:
        assert r.returncode == 0, r.stdout + r.stderr
        return
    assert r.returncode == 1, r.stdout + r.stderr  # an error, not a crash
    assert message in r.stderr, r.stderr
