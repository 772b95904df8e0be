"""End-to-end checks of the kiln command: real models in, exit codes and output out."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import make_demo_model


def test_help_and_usage_exit_codes(kiln):
    assert kiln("--help").returncode == 0
    assert kiln("run", "--help").returncode == 0
    assert kiln("no-such-command").returncode == 2
    assert kiln().returncode == 2


def test_inspect_reports_io_ops_and_parameters(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    r = kiln("inspect", tmp_path / "demo.onnx")
    assert r.returncode == 0, r.stderr
    assert "image: float[batch,3,8,8]" in r.stdout
    assert "probs: float[batch,10]" in r.stdout
    params = 8 * 3 * 3 * 3 + 8 + 10 * 128 + 10
    assert f"parameters: {params} " in r.stdout
    assert "Conv" in r.stdout and "Softmax" in r.stdout


def test_run_matches_numpy_for_given_input(kiln, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        initializer=[numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "add.onnx")
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x).SerializeToString())
    r = kiln("run", tmp_path / "add.onnx", "--input", f"x={tmp_path / 'x.pb'}")
    assert r.returncode == 0, r.stderr
    y = x + b
    assert f"output y: float[2,3]  min {y.min():.6g} max {y.max():.6g}" in r.stdout


def test_corrupt_model_is_a_clear_error(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    data = (tmp_path / "demo.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    r = kiln("run", tmp_path / "cut.onnx")
    assert r.returncode == 1
    assert "not a valid ONNX model" in r.stderr


def test_unknown_input_name_is_refused(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    (tmp_path / "x.pb").write_bytes(
        numpy_helper.from_array(np.zeros((1, 3, 8, 8), np.float32)).SerializeToString())
    r = kiln("run", tmp_path / "demo.onnx", "--input", f"nope={tmp_path / 'x.pb'}")
    assert r.returncode == 1
    assert "no input named 'nope'" in r.stderr


def output_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith(("input ", "output "))]


def test_compiled_engine_runs_like_the_onnx_model(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    r = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "demo.kiln")
    assert r.returncode == 0, r.stderr
    assert "nodes: 6 -> 5" in r.stdout  # Conv + Relu -> FusedConv
    assert (tmp_path / "demo.kiln").read_bytes()[:8] == b"KILNENG1"
    a = kiln("run", tmp_path / "demo.onnx", "--seed", 5, "--dim", "batch=3")
    b = kiln("run", tmp_path / "demo.kiln", "--seed", 5, "--dim", "batch=3")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert output_lines(a.stdout) and output_lines(a.stdout) == output_lines(b.stdout)
    # The kind of file is told by its magic, not its name.
    (tmp_path / "engine.onnx").write_bytes((tmp_path / "demo.kiln").read_bytes())
    c = kiln("run", tmp_path / "engine.onnx", "--seed", 5, "--dim", "batch=3")
    assert c.returncode == 0, c.stderr
    assert output_lines(c.stdout) == output_lines(a.stdout)


def test_inspect_engine_prints_the_stamp(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    assert kiln("compile", tmp_path / "demo.onnx").returncode == 0  # default -o: demo.kiln
    r = kiln("inspect", tmp_path / "demo.kiln")
    assert r.returncode == 0, r.stderr
    for needle in ("engine format version: 3", "kiln version: ", "target: cpu:", "source hash: ",
                   "image: float[batch,3,8,8]", "probs: float[batch,10]"):
        assert needle in r.stdout


def test_compile_traces_and_dumps_passes(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    r = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "a.kiln", "--trace-passes",
             "--dump-after", "fold_constants")
    assert r.returncode == 0, r.stderr
    assert "pass fold_constants" in r.stdout and "# graph after fold_constants" in r.stdout
    r = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "b.kiln", "--dump-after", "nope")
    assert r.returncode == 1 and "unknown pass 'nope'" in r.stderr
    r = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "c.kiln", "--no-optimize")
    assert r.returncode == 0 and "(not optimized)" in r.stdout


def test_damaged_engines_are_clear_errors(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    assert kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "demo.kiln").returncode == 0
    data = bytearray((tmp_path / "demo.kiln").read_bytes())
    data[-5] ^= 0xFF
    (tmp_path / "flipped.kiln").write_bytes(bytes(data))
    r = kiln("run", tmp_path / "flipped.kiln")
    assert r.returncode == 1 and "corrupt engine file: checksum mismatch" in r.stderr
    (tmp_path / "cut.kiln").write_bytes(bytes(data[: len(data) // 2]))
    r = kiln("inspect", tmp_path / "cut.kiln")
    assert r.returncode == 1 and "truncated engine file" in r.stderr
    r = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "gpu.kiln", "--target", "gfx90a")
    assert r.returncode == 0, r.stderr
    r = kiln("run", tmp_path / "gpu.kiln")
    assert r.returncode == 1 and "engine compiled for target 'gfx90a'" in r.stderr
    r = kiln("compile", tmp_path / "demo.kiln", "-o", tmp_path / "again.kiln")
    assert r.returncode == 1 and "already a compiled Kiln engine" in r.stderr


def test_compile_shape_ranges_bound_dims_and_plan_memory(kiln, tmp_path):
    make_demo_model.build(str(tmp_path / "demo.onnx"))
    engine = tmp_path / "demo.kiln"
    r = kiln("compile", tmp_path / "demo.onnx", "-o", engine, "--shape-range", "image:1..16x3x8x8")
    assert r.returncode == 0, r.stderr
    # Conv output [16,8,8,8] floats is the largest buffer; the plan must hold at least it.
    planned = int(r.stdout.split("activation memory: ")[1].split()[0])
    assert planned >= 16 * 8 * 8 * 8 * 4
    info = kiln("inspect", engine)
    assert "image: float[batch[1..16],3,8,8]" in info.stdout
    assert "probs: float[batch[1..16],10]" in info.stdout
    bad = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "x.kiln", "--shape", "image:4x3x9")
    assert bad.returncode == 1 and "has rank 4" in bad.stderr
    fixed = kiln("compile", tmp_path / "demo.onnx", "-o", tmp_path / "x.kiln", "--shape", "image:2x3x8x7")
    assert fixed.returncode == 1 and "fixed at 8" in fixed.stderr


def test_compile_stores_packed_weights_and_both_engines_agree(kiln, tmp_path):
    make_demo_model.build_convs(str(tmp_path / "convs.onnx"))
    r0 = r = kiln("compile", tmp_path / "convs.onnx", "-o", tmp_path / "packed.kiln")
    assert r.returncode == 0, r.stderr
    assert "packed weights: 2 (" in r.stdout
    r = kiln("compile", tmp_path / "convs.onnx", "-o", tmp_path / "plain.kiln", "--no-prepack")
    assert r.returncode == 0, r.stderr
    assert "packed weights" not in r.stdout
    # Only the convolutions read their weights: each is stored once, packed (padded to whole
    # channel blocks: at most twice the plain bytes here), not beside a plain copy.
    assert "stored once: 2 of the packed weights" in r0.stdout
    conv_weights = (16 * 8 * 9 + 8 * 16 * 9) * 4
    extra = (tmp_path / "packed.kiln").stat().st_size - (tmp_path / "plain.kiln").stat().st_size
    assert extra <= conv_weights + 128
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x).SerializeToString())
    outs = []
    for name in ("packed", "plain"):
        r = kiln("run", tmp_path / f"{name}.kiln", "--input", f"x={tmp_path / 'x.pb'}",
                 "--output-dir", tmp_path / name)
        assert r.returncode == 0, r.stderr
        t = onnx.TensorProto()
        t.ParseFromString((tmp_path / name / "y.pb").read_bytes())
        outs.append(numpy_helper.to_array(t))
    assert outs[0].shape == (1, 8, 6, 6)
    np.testing.assert_array_equal(outs[0], outs[1])
