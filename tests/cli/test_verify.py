"""kiln verify against the reference interpreter and onnxruntime; kiln run --output-dir."""
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import cli_models


def write_tensor(path, array, name=""):
    path.write_bytes(numpy_helper.from_array(array, name).SerializeToString())


def test_verify_demo_onnx_against_both_references(kiln, demo):
    r = kiln("verify", demo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "against the reference interpreter on the original graph" in r.stdout
    assert f"against onnxruntime {ort.__version__}" in r.stdout
    assert "verify: PASS" in r.stdout
    assert r.stderr == ""


# Each model's own dims: --dim refuses a name the model lacks.
@pytest.mark.parametrize("build,dims,engine_dims", [
    (cli_models.mlp, ["--dim", "n=3"], ["--dim", "n=2"]),
    (cli_models.conv_bn, [], []),
    (cli_models.layernorm_softmax, ["--dim", "b=2,s=5"], ["--dim", "b=1,s=3"]),
])
def test_verify_agrees_with_onnxruntime_on_onnx_and_engine(kiln, tmp_path, build, dims,
                                                           engine_dims):
    model = build(tmp_path / "m.onnx")
    r = kiln("verify", model, "--reference", "onnxruntime", *dims, "--seed", 4)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verify: PASS" in r.stdout
    c = kiln("compile", model, "-o", tmp_path / "m.kiln")
    assert c.returncode == 0, c.stdout + c.stderr
    assert "precision gate: PASS" in c.stdout
    r = kiln("verify", tmp_path / "m.kiln", *engine_dims)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"original model: {model}" in r.stdout
    assert "verify: PASS" in r.stdout and "onnxruntime" in r.stdout


def test_run_output_dir_matches_onnxruntime(kiln, demo, tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    write_tensor(tmp_path / "image.pb", x, "image")
    r = kiln("run", demo, "--input", f"image={tmp_path / 'image.pb'}", "--output-dir",
             tmp_path / "out")
    assert r.returncode == 0, r.stderr
    proto = onnx.TensorProto()
    proto.ParseFromString((tmp_path / "out" / "probs.pb").read_bytes())
    assert proto.name == "probs"
    ours = numpy_helper.to_array(proto)
    expected = ort.InferenceSession(str(demo)).run(None, {"image": x})[0]
    assert ours.shape == (3, 10)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_run_output_dir_makes_names_file_safe(kiln, tmp_path):
    model = cli_models.odd_output_name(tmp_path / "odd.onnx")
    r = kiln("run", model, "--output-dir", tmp_path / "out", "--seed", 2)
    assert r.returncode == 0, r.stderr
    proto = onnx.TensorProto()
    proto.ParseFromString((tmp_path / "out" / "out_put_0.pb").read_bytes())
    assert proto.name == "out/put:0"
    assert numpy_helper.to_array(proto).shape == (2, 2)


def test_verify_engine_finds_its_source_or_takes_onnx(kiln, demo, tmp_path):
    assert kiln("compile", demo, "-o", tmp_path / "demo.kiln").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(tmp_path / "demo.kiln", elsewhere / "demo.kiln")
    shutil.move(demo, tmp_path / "renamed.onnx")
    r = kiln("verify", elsewhere / "demo.kiln")
    assert r.returncode == 1
    assert "--onnx" in r.stderr and "demo.onnx" in r.stderr
    r = kiln("verify", elsewhere / "demo.kiln", "--onnx", tmp_path / "renamed.onnx")
    assert r.returncode == 0, r.stdout + r.stderr
    # Another model under --onnx is called out.
    other = cli_models.mlp(tmp_path / "other.onnx")
    r = kiln("verify", elsewhere / "demo.kiln", "--onnx", other)
    assert "hash differs" in r.stderr


def corrupted_engine(kiln, demo, tmp_path, weight):
    engine = tmp_path / "bad.kiln"
    r = kiln("compile", demo, "-o", engine, "--allow-drift", env={"KILN_TEST_CORRUPT_WEIGHT": weight})
    assert r.returncode == 0, r.stderr
    return engine


def test_verify_names_the_first_drifting_node(kiln, demo, tmp_path):
    engine = corrupted_engine(kiln, demo, tmp_path, "fc_w")
    r = kiln("verify", engine)
    assert r.returncode == 1
    assert "verify: FAIL" in r.stdout
    # Both references localize the drift to the Gemm that reads the corrupted weight.
    assert r.stdout.count("first drifting node: Gemm #4 (output 'logits'") == 2, r.stdout
    # A tolerance loose enough lets it through.
    r = kiln("verify", engine, "--max-rel-l2", "1", "--reference", "interpreter")
    assert r.returncode == 0 and "verify: PASS" in r.stdout
    # The element rule tightens it again.
    r = kiln("verify", engine, "--max-rel-l2", "1", "--rtol", "1e-3", "--atol", "1e-6",
             "--reference", "interpreter")
    assert r.returncode == 1 and "out of tolerance" in r.stdout


def test_verify_without_onnxruntime(kiln, demo):
    no_python = {"KILN_PYTHON": "/nonexistent/python3"}
    r = kiln("verify", demo, env=no_python)
    assert r.returncode == 0, r.stderr
    assert "onnxruntime: not installed, skipped" in r.stdout
    r = kiln("verify", demo, "--reference", "onnxruntime", env=no_python)
    assert r.returncode == 1 and "onnxruntime is not available" in r.stderr
    r = kiln("verify", demo, "--reference", "interpreter", env=no_python)
    assert r.returncode == 0 and "onnxruntime" not in r.stdout


def test_verify_uses_given_inputs(kiln, demo, tmp_path):
    write_tensor(tmp_path / "x.pb", np.ones((5, 3, 8, 8), np.float32))
    r = kiln("verify", demo, "--input", f"image={tmp_path / 'x.pb'}")
    assert r.returncode == 0, r.stderr
    assert "input  image: float[5,3,8,8]" in r.stdout
    r = kiln("verify", demo, "--input", f"nope={tmp_path / 'x.pb'}")
    assert r.returncode == 1 and "no input named 'nope'" in r.stderr


def test_verify_when_onnxruntime_cannot_run_the_model(kiln, tmp_path):
    model = cli_models.adagrad(tmp_path / "adagrad.onnx")
    r = kiln("verify", model)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cannot run the model, skipped" in r.stdout and "Adagrad" in r.stdout
    assert "Traceback" not in r.stdout
    assert "verify: PASS: 2 outputs within tolerance of the reference interpreter\n" in r.stdout
    r = kiln("verify", model, "--reference", "onnxruntime")
    assert r.returncode == 1 and "onnxruntime failed on" in r.stderr
