"""The graph fusions on whole models through `kiln compile`: node counts drop, fused ops reach the
engine file, and the engine computes what the unoptimized ONNX model computes."""
import os
import re
import subprocess

import numpy as np
import pytest

import make_transformer_model


def summary_numbers(stdout):
    """min, max, mean and the first values of every output line of `kiln run`."""
    numbers = []
    for line in stdout.splitlines():
        if line.startswith("output "):
            body = line.split("min ", 1)[1]
            numbers += [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", body)]
    return np.array(numbers)


def compile_and_compare(kiln, tmp_path, dims):
    r = kiln("compile", tmp_path / "encoder.onnx", "-o", tmp_path / "encoder.kiln")
    assert r.returncode == 0, r.stderr
    before, after = map(int, re.search(r"nodes: (\d+) -> (\d+)", r.stdout).groups())
    dim_args = [a for d in dims for a in ("--dim", d)]
    a = kiln("run", tmp_path / "encoder.onnx", "--seed", 3, *dim_args)
    b = kiln("run", tmp_path / "encoder.kiln", "--seed", 3, *dim_args)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ref, got = summary_numbers(a.stdout), summary_numbers(b.stdout)
    assert ref.size > 0 and ref.shape == got.shape
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
    inspect = kiln("inspect", tmp_path / "encoder.kiln")
    assert inspect.returncode == 0, inspect.stderr
    return before, after, inspect.stdout


@pytest.mark.parametrize("opset", [13, 17])
def test_encoder_fuses_to_attention_and_layer_norms(kiln, tmp_path, opset):
    make_transformer_model.build(str(tmp_path / "encoder.onnx"), layers=2, opset=opset)
    before, after, ops = compile_and_compare(kiln, tmp_path, ["batch=2", "seq=5"])
    assert after < before / 3, (before, after)
    assert re.search(r"ai\.kiln\.ScaledDotProductAttention +2\b", ops)
    assert re.search(r"ai\.kiln\.SkipLayerNormalization +4\b", ops)
    assert "ai.kiln=1" in ops
    for gone in ("Softmax", "ReduceMean", "Erf", "Shape", "Concat", "Gather"):
        assert not re.search(rf"^  {gone} ", ops, re.M), gone


def test_static_tanh_encoder(kiln, tmp_path):
    make_transformer_model.build(str(tmp_path / "encoder.onnx"), layers=1, dynamic=False,
                                 tanh=True)
    before, after, ops = compile_and_compare(kiln, tmp_path, [])
    assert after < before / 3, (before, after)
    assert re.search(r"ai\.kiln\.FusedMatMul +4\b", ops)


def test_disabled_passes_leave_their_patterns(kiln, tmp_path, monkeypatch):
    make_transformer_model.build(str(tmp_path / "encoder.onnx"), layers=1)
    monkeypatch.setenv("KILN_DISABLE_PASSES", "fuse_attention,fuse_layer_norm")
    r = kiln("compile", tmp_path / "encoder.onnx", "-o", tmp_path / "encoder.kiln")
    assert r.returncode == 0, r.stderr
    ops = kiln("inspect", tmp_path / "encoder.kiln").stdout
    assert re.search(r"^  Softmax +1\b", ops, re.M)
    assert re.search(r"^  ReduceMean +4\b", ops, re.M)


SYSTEM_PYTHON = "/usr/bin/python3"


def system_torch():
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not system_torch(), reason="needs Debian's python3-torch")
@pytest.mark.parametrize("opset,extra", [(13, []), (14, ["--tanh"]), (17, []), (13, ["--static"])])
def test_torch_exported_encoder_layer(kiln, tmp_path, opset, extra):
    script = os.path.join(os.path.dirname(make_transformer_model.__file__),
                          "export_torch_encoder.py")
    r = subprocess.run([SYSTEM_PYTHON, script, str(tmp_path / "encoder.onnx"), "--opset",
                        str(opset), *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    dims = [] if "--static" in extra else ["batch=2", "seq=5"]
    before, after, ops = compile_and_compare(kiln, tmp_path, dims)
    # 17 nodes as docs/FUSIONS.md lists them, less the 4 head split / merge Transposes that the
    # CPU's attention reads through strides (fold_attention_transposes: bsnh).
    assert after == 13, (before, after, ops)
    assert re.search(r"ai\.kiln\.ScaledDotProductAttention +1\b", ops)
    assert re.search(r"ai\.kiln\.SkipLayerNormalization +2\b", ops)
    assert not re.search(r"^  Transpose ", ops, re.M), ops
