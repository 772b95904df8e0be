"""kiln.prune (the compiler library's prune_model through the Python module) against `kiln prune`
and the C ABI's kiln_prune (libkiln.so through ctypes): the same model, input sets and options
give the same file, byte for byte; the result comes back as data (pruned layers, layers left
alone and why, sizes and FLOPs before and after, the gate's scores); bad options are kiln
exceptions (or C statuses) naming what is wrong."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import kiln

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from prune_models import residual_cnn  # noqa: E402


def sets(n=3):
    rng = np.random.default_rng(0)
    return [{"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def test_prune_matches_the_cli_and_the_c_abi(tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    lines = []
    r = kiln.prune(model, tmp_path / "py.onnx", method="channels", ratio=0.5, calibration=sets(),
                   min_cosine=0.0, log=lambda kind, text: lines.append(text))
    assert r.passed and r.input_sets == 3
    conv1, conv2 = r.layers
    assert (conv1.name, conv1.channels_before, conv1.channels_after) == ("conv1", 8, 4)
    assert conv1.parameters_after == conv1.parameters_before // 2
    assert (conv2.name, conv2.joined, conv2.channels_after) == ("conv2", ["conv3"], 8)
    assert dict(r.left_alone)["fc"] == "its channels reach the graph output 'logits'"
    assert r.after.parameters < r.before.parameters and r.after.flops < r.before.flops
    assert 0 < r.after.file_bytes < r.before.file_bytes
    assert r.outputs[0].name == "logits" and r.outputs[0].top1 is not None
    assert "".join(lines) == r.report and "prune gate: output 'logits'" in r.report
    onnx.checker.check_model(onnx.load(str(tmp_path / "py.onnx")))

    cli = os.environ.get("KILN_CLI")
    if not cli:
        pytest.skip("KILN_CLI (the kiln command) is not set")
    npz = []
    for i, s in enumerate(sets()):
        npz.append(tmp_path / f"c{i}.npz")
        np.savez(npz[-1], **s)
    args = [cli, "prune", str(model), "-o", str(tmp_path / "cli.onnx"), "--ratio", "0.5",
            "--min-cosine", "0"]
    for p in npz:
        args += ["--calibration-npz", str(p)]
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "py.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()

    lib_path = os.environ.get("KILN_LIBRARY") or os.path.join(os.path.dirname(cli), "capi",
                                                              "libkiln.so")
    r2 = kiln.prune(model, tmp_path / "alone.onnx", ratio=0.5, calibration=sets(),
                    min_cosine=0.0, residual_groups=False)
    assert [layer.name for layer in r2.layers] == ["conv1"]
    assert "residual" in dict(r2.left_alone)["conv2"]
    if not os.path.exists(lib_path):
        pytest.skip(f"no {lib_path}")
    lib = ctypes.CDLL(lib_path)
    p = ctypes.c_void_p
    lib.kiln_prune_options_create.argtypes = [ctypes.POINTER(p)]
    lib.kiln_prune_options_set_config.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p]
    lib.kiln_prune.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.POINTER(p)]
    lib.kiln_prune_result_gate.argtypes = [p, ctypes.POINTER(ctypes.c_int),
                                           ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(ctypes.c_size_t)]
    lib.kiln_prune_result_sizes.argtypes = [p] + [ctypes.POINTER(ctypes.c_int64)] * 2 + \
        [ctypes.POINTER(ctypes.c_double)] * 2
    lib.kiln_prune_result_destroy.argtypes = [p]
    lib.kiln_prune_options_destroy.argtypes = [p]
    lib.kiln_last_error_message.restype = ctypes.c_char_p
    opts = p()
    assert lib.kiln_prune_options_create(ctypes.byref(opts)) == 0
    for key, value in [("ratio", "0.5"), ("min_cosine", "0")] + \
            [("calibration_npz", str(n)) for n in npz]:
        assert lib.kiln_prune_options_set_config(opts, key.encode(), value.encode()) == 0
    assert lib.kiln_prune_options_set_config(opts, b"ratoi", b"0.5") != 0
    assert b"did you mean 'ratio'" in lib.kiln_last_error_message()
    assert lib.kiln_prune_options_set_config(opts, b"method", b"4:8") != 0
    result = p()
    status = lib.kiln_prune(str(model).encode(), str(tmp_path / "c.onnx").encode(), opts,
                            ctypes.byref(result))
    assert status == 0, lib.kiln_last_error_message()
    passed, failure, layers = ctypes.c_int(), ctypes.c_char_p(), ctypes.c_size_t()
    assert lib.kiln_prune_result_gate(result, ctypes.byref(passed), ctypes.byref(failure),
                                      ctypes.byref(layers)) == 0
    assert passed.value == 1 and layers.value == len(r.layers) == 2
    pb, pa, fb, fa = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_double(), ctypes.c_double()
    assert lib.kiln_prune_result_sizes(result, ctypes.byref(pb), ctypes.byref(pa), ctypes.byref(fb),
                                       ctypes.byref(fa)) == 0
    assert (pb.value, pa.value) == (r.before.parameters, r.after.parameters)
    lib.kiln_prune_result_destroy(result)
    lib.kiln_prune_options_destroy(opts)
    assert (tmp_path / "c.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()


def test_prune_masks_and_errors(tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    r = kiln.prune(model, tmp_path / "m.onnx", method="2:4", calibration=sets(1),
                   allow_drift=True)
    assert {layer.name for layer in r.layers} == {"conv2", "conv3", "fc"}
    assert all(layer.zeros == layer.parameters_after // 2 for layer in r.layers)
    with pytest.raises(kiln.InvalidArgument, match="has cosine below 1"):
        kiln.prune(model, tmp_path / "q.onnx", ratio=0.5, calibration=sets(1), min_cosine=1.0)
    assert not (tmp_path / "q.onnx").exists()
    with pytest.raises(kiln.InvalidArgument, match=r"ratio must be a number in \[0, 1\)"):
        kiln.prune(model, tmp_path / "q.onnx", ratio=1.0)
    with pytest.raises(kiln.InvalidArgument, match="method is one of"):
        kiln.prune(model, tmp_path / "q.onnx", method="4:8")
    with pytest.raises(kiln.InvalidArgument, match="'nope', not a prunable layer"):
        kiln.prune(model, tmp_path / "q.onnx", layer_ratios={"nope": 0.5})
    with pytest.raises(TypeError, match="model is a path"):
        kiln.prune(b"bytes", tmp_path / "q.onnx")
