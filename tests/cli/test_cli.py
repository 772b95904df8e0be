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
