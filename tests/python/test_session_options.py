"""SessionOptions and RunOptions: a name ORT code could mean is either honoured or warned about;
any other name is refused with the valid ones and the closest (typos are errors)."""
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kiln
from kiln import _kiln


def test_unknown_attribute_is_refused_with_a_suggestion():
    so = kiln.SessionOptions()
    with pytest.raises(AttributeError) as e:
        so.bogus_attr = 1
    assert "SessionOptions has no option 'bogus_attr'" in str(e.value)
    assert "did you mean" not in str(e.value)
    assert "intra_op_num_threads" in str(e.value) and "execution_mode" in str(e.value)
    with pytest.raises(AttributeError, match=r"no option 'intra_op_num_thread'; did you mean "
                                             r"'intra_op_num_threads'\? \(its options: "):
        so.intra_op_num_thread = 2
    with pytest.raises(AttributeError, match="did you mean 'optimized_model_filepath'"):
        so.optimised_model_filepath  # reading a misspelt name is refused the same way
    assert not hasattr(so, "bogus_attr")
    with pytest.raises(AttributeError, match="RunOptions has no option 'run_tg'; did you mean 'run_tag'"):
        kiln.RunOptions().run_tg = "x"


def test_option_names_are_onnxruntimes():
    ours = [n for n in dir(kiln.SessionOptions()) if not n.startswith("_") and
            not callable(getattr(kiln.SessionOptions(), n))]
    assert "optimized_model_filepath" in ours and "execution_mode" in ours
    assert set(ours) <= set(dir(ort.SessionOptions()))


def test_values_are_type_checked():
    so = kiln.SessionOptions()
    with pytest.raises(TypeError, match="SessionOptions.execution_mode must be a kiln.ExecutionMode"):
        so.execution_mode = "parallel"
    with pytest.raises(TypeError, match="SessionOptions.intra_op_num_threads must be an int"):
        so.intra_op_num_threads = "4"
    with pytest.raises(TypeError, match="must be a bool"):
        so.enable_profiling = "yes"
    with pytest.raises(TypeError, match="must be a path"):
        so.optimized_model_filepath = 3
    # ORT's own enums convert: code that imports both keeps working.
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    assert so.execution_mode is kiln.ExecutionMode.ORT_PARALLEL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.graph_optimization_level is kiln.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_optimized_model_filepath_writes_the_graph_the_session_runs(mlp_model, tmp_path):
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    so = kiln.SessionOptions()
    so.optimized_model_filepath = tmp_path / "opt.onnx"  # os.PathLike, as ORT takes
    sess = kiln.InferenceSession(mlp_model, sess_options=so)
    written = onnx.load(str(tmp_path / "opt.onnx"))
    ops = [n.op_type for n in written.graph.node]
    assert len(ops) < 4, ops  # optimized: MatMul + Add (+ Relu) fused
    assert any(n.domain == "ai.kiln" for n in written.graph.node)
    again = kiln.InferenceSession(str(tmp_path / "opt.onnx"))
    for a, b in zip(sess.run(None, {"x": x}), again.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)
    # With the passes off it is the graph as imported, which ORT opens too.
    so.graph_optimization_level = kiln.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "plain.onnx")
    kiln.InferenceSession(mlp_model, sess_options=so)
    plain = onnx.load(str(tmp_path / "plain.onnx"))
    assert [n.op_type for n in plain.graph.node] == ["MatMul", "Add", "Relu", "Softmax"]
    ref = ort.InferenceSession(str(tmp_path / "plain.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ref.run(None, {"x": x})[1], sess.run(None, {"x": x})[1], rtol=1e-5)


def test_optimized_model_filepath_errors(mlp_model, tmp_path):
    so = kiln.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "m.ort")
    with pytest.raises(kiln.InvalidArgument, match="writes the optimized model as ONNX"):
        kiln.InferenceSession(mlp_model, sess_options=so)
    so.optimized_model_filepath = str(tmp_path / "m.kiln")
    with pytest.raises(kiln.InvalidArgument, match="kiln compile"):
        kiln.InferenceSession(mlp_model, sess_options=so)
    so.optimized_model_filepath = str(tmp_path / "no" / "such" / "dir" / "m.onnx")
    with pytest.raises(kiln.KilnError, match="optimized_model_filepath: cannot write '.*m.onnx'"):
        kiln.InferenceSession(mlp_model, sess_options=so)


def test_parallel_execution_mode_warns(mlp_model):
    so = kiln.SessionOptions()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sequential, the default: nothing to say
        so.execution_mode = kiln.ExecutionMode.ORT_SEQUENTIAL
        kiln.InferenceSession(mlp_model, sess_options=so)
    so.execution_mode = kiln.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 4
    with pytest.warns(RuntimeWarning, match="ORT_PARALLEL: Kiln runs the nodes one after another"):
        sess = kiln.InferenceSession(mlp_model, sess_options=so)
    assert sess.run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 3)


@pytest.mark.parametrize("name,value", [("enable_mem_pattern", False), ("enable_cpu_mem_arena", False),
                                        ("enable_mem_reuse", False),
                                        ("use_deterministic_compute", True)])
def test_options_kiln_cannot_honour_warn(mlp_model, name, value):
    so = kiln.SessionOptions()
    setattr(so, name, value)
    with pytest.warns(RuntimeWarning, match=f"SessionOptions.{name} is {value}: .*no effect"):
        kiln.InferenceSession(mlp_model, sess_options=so)


def test_log_severity_level_is_checked(mlp_model):
    so = kiln.SessionOptions()
    so.log_severity_level = 7
    with pytest.raises(kiln.InvalidArgument, match="log_severity_level must be 0 .* to 4"):
        kiln.InferenceSession(mlp_model, sess_options=so)


def test_closest_name_is_the_clis():
    assert _kiln.closest_name("batc", ["batch", "seq"]) == "batch"
    assert _kiln.closest_name("comple", ["compile", "run"]) == "compile"
    assert _kiln.closest_name("iter", ["iterations"]) == "iterations"  # an abbreviation
    assert _kiln.closest_name("tpyo", ["typo"]) == "typo"  # a swap is one edit
    assert _kiln.closest_name("zzzzzz", ["compile", "run"]) is None
    assert _kiln.closest_name("x", ["y"]) is None  # one letter is too short to guess from
