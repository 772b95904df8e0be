"""kiln.compile (the compiler library through the Python module) against `kiln compile` and the C
ABI's kiln_compile (libkiln.so through ctypes): the same model and options give the same engine
file, byte for byte (the engine has no timestamp; it stamps the model's path as given, so all three
get the same absolute path). Plus the options only Python has (model bytes, calibration sets,
log callback) and the errors, which are kiln exceptions naming what is wrong.

Needs KILN_CLI (the kiln command; `make test-python` sets it); libkiln.so is found beside it
(build/src/capi), or at KILN_LIBRARY.
"""
import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

import kiln

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_demo_model  # noqa: E402


@pytest.fixture
def kiln_cli():
    cli = os.environ.get("KILN_CLI")
    if not cli:
        pytest.skip("KILN_CLI (the kiln command) is not set")
    return cli


@pytest.fixture(scope="module")
def libkiln():
    path = os.environ.get("KILN_LIBRARY")
    if not path and os.environ.get("KILN_CLI"):
        path = os.path.join(os.path.dirname(os.environ["KILN_CLI"]), "capi", "libkiln.so")
    if not path or not os.path.exists(path):
        pytest.skip("libkiln.so not found (set KILN_LIBRARY or KILN_CLI)")
    lib = ctypes.CDLL(path)
    p = ctypes.c_void_p
    lib.kiln_compile_options_create.argtypes = [ctypes.POINTER(p)]
    lib.kiln_compile_options_destroy.argtypes = [p]
    lib.kiln_compile_options_destroy.restype = None
    lib.kiln_compile_options_add_shape.argtypes = [p, ctypes.c_char_p]
    for name in ("fp16", "prepack", "verify"):
        getattr(lib, f"kiln_compile_options_set_{name}").argtypes = [p, ctypes.c_int]
    lib.kiln_compile.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.POINTER(p)]
    lib.kiln_compile_options_set_config.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p]
    lib.kiln_compile_result_destroy.argtypes = [p]
    lib.kiln_compile_result_destroy.restype = None
    lib.kiln_compile_result_report.argtypes = [p, ctypes.POINTER(ctypes.c_char_p)]
    lib.kiln_last_error_message.restype = ctypes.c_char_p
    return lib


@pytest.fixture
def demo(tmp_path):
    """The demo CNN (tools/make_demo_model.py): image float[batch,3,8,8] -> probs."""
    path = tmp_path / "demo.onnx"
    make_demo_model.build(str(path))
    return str(path)


# Each case: CLI flags and the same options as kiln.compile keywords.
CASES = {
    "default": ([], {}),
    "range-fp16": (["--shape-range", "image:1..16x3x8x8", "--fp16"],
                   {"shapes": {"image": [(1, 16), 3, 8, 8]}, "fp16": True}),
    "fixed-no-prepack": (["--shape", "image:2x3x8x8", "--no-prepack"],
                         {"shapes": {"image": "2x3x8x8"}, "prepack": False}),
    "no-verify": (["--no-verify"], {"verify": False}),
    "range-verify-full": (["--shape-range", "image:1..4x3x8x8", "--verify-full"],
                          {"shapes": {"image": "1..4x3x8x8"}, "verify_full": True}),
    # bfloat16 (skipped on a CPU without bfloat16 instructions, where --bf16 is refused).
    "range-bf16": (["--shape-range", "image:1..16x3x8x8", "--bf16"],
                   {"shapes": {"image": [(1, 16), 3, 8, 8]}, "precision": "bf16"}),
    # A device this machine may lack: a warning, the plan left to the engine's first open there.
    "device-gpu": (["--device", "gpu", "--no-verify"], {"device": "gpu", "verify": False}),
}


def c_compile(lib, model, output, cli_flags):
    """kiln_compile with the options of `cli_flags` (the subset CASES uses)."""
    opts = ctypes.c_void_p()
    assert lib.kiln_compile_options_create(ctypes.byref(opts)) == 0
    try:
        flags = list(cli_flags)
        while flags:
            flag = flags.pop(0)
            if flag in ("--shape", "--shape-range"):
                assert lib.kiln_compile_options_add_shape(opts, flags.pop(0).encode()) == 0
            elif flag == "--fp16":
                assert lib.kiln_compile_options_set_fp16(opts, 1) == 0
            elif flag == "--bf16":
                assert lib.kiln_compile_options_set_config(opts, b"precision", b"bf16") == 0
            elif flag == "--no-prepack":
                assert lib.kiln_compile_options_set_prepack(opts, 0) == 0
            elif flag == "--no-verify":
                assert lib.kiln_compile_options_set_verify(opts, 0) == 0
            elif flag == "--verify-full":
                assert lib.kiln_compile_options_set_verify_full(opts, 1) == 0
            elif flag == "--device":
                assert lib.kiln_compile_options_set_device(opts, flags.pop(0).encode()) == 0
            else:
                raise AssertionError(f"c_compile does not map {flag}")
        status = lib.kiln_compile(model.encode(), output.encode(), opts, None)
        return status, lib.kiln_last_error_message().decode()
    finally:
        lib.kiln_compile_options_destroy(opts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_python_c_and_cli_write_the_same_engine(case, demo, kiln_cli, libkiln, tmp_path):
    flags, keywords = CASES[case]
    if "--bf16" in flags and " avx512_bf16" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no bfloat16 instructions: --bf16 is refused")
    cli_engine, py_engine, c_engine = (str(tmp_path / f"{n}.kiln") for n in ("cli", "py", "c"))
    r = subprocess.run([kiln_cli, "compile", demo, "-o", cli_engine, *flags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    result = kiln.compile(demo, py_engine, **keywords)
    status, message = c_compile(libkiln, demo, c_engine, flags)
    assert status == 0, message
    cli_bytes = open(cli_engine, "rb").read()
    assert open(py_engine, "rb").read() == cli_bytes
    assert open(c_engine, "rb").read() == cli_bytes
    # The report is the CLI's output, but for its own path and the times taken (the write's, the
    # gate's).
    normalize = lambda text, path: "\n".join(  # noqa: E731
        re.sub(r" in \d+\.\d+ s$", "", line)
        for line in text.replace(path, "ENGINE").splitlines() if not line.startswith("wrote"))
    assert normalize(result.report, py_engine) == normalize(r.stdout, cli_engine)
    assert result.engine_path == py_engine and result.engine_bytes == len(cli_bytes)
    assert result.gate.ran == keywords.get("verify", True) and result.gate.passed == result.gate.ran


def test_result_describes_the_compile(demo, tmp_path):
    r = kiln.compile(demo, tmp_path / "d.kiln", shapes={"image": "1..4x3x8x8"})
    assert r.nodes_before == 6 and r.nodes_after == 5
    assert r.kernels["cpu:onednn.conv"] == 1 and sum(r.kernels.values()) == r.nodes_after
    assert r.fallbacks == [] and r.fallback_flop_share == 0.0 and r.total_flops > 0
    assert r.gate.input_sets == 2 and set(r.gate.worst_rel_l2) == {"probs"}
    assert r.gate.worst_rel_l2["probs"] < 1e-4
    assert r.timings_ms["total"] >= r.timings_ms["gate"] > 0
    assert ("packed weights:" in r.report) == (r.packed_weights > 0) and r.fp16_summary == ""
    sess = kiln.InferenceSession(r.engine_path)
    assert sess.get_inputs()[0].dim_ranges[0] == (1, 4)


def test_reference_kernel_nodes_are_reported_with_their_flops(tmp_path, save_model):
    from onnx import TensorProto, helper
    # Det has no fast kernel: its node stays on the reference kernel.
    nodes = [helper.make_node("Det", ["x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    path = save_model("det", nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    r = kiln.compile(path, tmp_path / "det.kiln")
    assert [f.op_type for f in r.fallbacks] == ["Det"]
    assert 0 < r.fallback_flop_share <= 1
    assert "reference kernels (no fast kernel): 1 of 2 nodes" in r.report


def test_model_bytes_and_model_proto(demo, tmp_path):
    proto = onnx.load(demo)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = kiln.InferenceSession(demo).run(None, {"image": x})
    for i, source in enumerate((open(demo, "rb").read(), proto)):
        r = kiln.compile(source, tmp_path / f"m{i}.kiln")
        got = kiln.InferenceSession(r.engine_path).run(None, {"image": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.InvalidArgument, match="give the engine's output path"):
        kiln.compile(proto)


def test_calibration_sets_dict_list_and_npz(demo, tmp_path):
    rng = np.random.default_rng(3)
    a = {"image": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    b = {"image": rng.standard_normal((5, 3, 8, 8)).astype(np.float32)}
    r = kiln.compile(demo, tmp_path / "a.kiln", calibration=a)
    assert "PASS on 1 calibration input set:" in r.report and r.gate.input_sets == 1
    np.savez(tmp_path / "b.npz", **b)
    r = kiln.compile(demo, tmp_path / "b.kiln", calibration=[a, tmp_path / "b.npz"])
    assert "PASS on 2 calibration input sets:" in r.report
    with pytest.raises(kiln.NotFound, match="the model has no input named 'imag'"):
        kiln.compile(demo, tmp_path / "c.kiln", calibration={"imag": a["image"]})
    with pytest.raises(kiln.NotFound, match="no file"):
        kiln.compile(demo, tmp_path / "c.kiln", calibration=tmp_path / "missing.npz")
    with pytest.raises(kiln.InvalidArgument, match="calibration: the list of input sets is empty"):
        kiln.compile(demo, tmp_path / "c.kiln", calibration=[])


def test_log_callback_gets_report_trace_and_warning(demo, tmp_path, monkeypatch):
    seen = []
    kiln.compile(demo, tmp_path / "a.kiln", trace_passes=True, log=lambda k, t: seen.append((k, t)))
    kinds = {k for k, _ in seen}
    assert kinds == {"report", "trace"}
    assert any(t.startswith("pass fold_constants") for k, t in seen if k == "trace")
    assert all(t.endswith("\n") for _, t in seen)
    # A corrupted weight (the test hook) drifts: refused, or written with a warning.
    monkeypatch.setenv("KILN_TEST_CORRUPT_WEIGHT", "conv_w")
    seen.clear()
    with pytest.raises(kiln.InvalidArgument, match="precision gate: output 'probs' drifts"):
        kiln.compile(demo, tmp_path / "b.kiln", log=lambda k, t: seen.append((k, t)))
    assert not (tmp_path / "b.kiln").exists() and not (tmp_path / "b.kiln.unverified").exists()
    assert ("note", "test hook: corrupted weight 'conv_w'\n") in seen
    seen.clear()
    r = kiln.compile(demo, tmp_path / "b.kiln", allow_drift=True,
                     log=lambda k, t: seen.append((k, t)))
    assert not r.gate.passed and "first drifting node" in r.gate.failure
    assert any(k == "warning" and "Writing the engine anyway" in t for k, t in seen)
    assert (tmp_path / "b.kiln").exists()


@pytest.mark.parametrize("kwargs,error,match", [
    ({"shapes": {"image": "1..ax3x8x8"}}, kiln.InvalidArgument, "is not a number or MIN..MAX"),
    ({"shapes": {"image": "4..1x3x8x8"}}, kiln.InvalidArgument, "bad dim range '4..1'"),
    ({"shapes": ["image"]}, kiln.InvalidArgument, "must be NAME:D1xD2x"),
    ({"shapes": {"image": [True, 3, 8, 8]}}, kiln.InvalidArgument, "a dim is an int"),
    ({"shapes": {"imag": "1x3x8x8"}}, kiln.NotFound, "no input named 'imag'"),
    ({"dims": {"batc": 2}}, kiln.InvalidArgument, "did you mean 'batch'"),
    ({"max_rel_l2": -1}, kiln.InvalidArgument, "max_rel_l2 must be a number >= 0"),
    ({"threads": -1}, kiln.InvalidArgument, "threads must be an int >= 0"),
    ({"fp16_io": True}, kiln.InvalidArgument, "fp16_io needs fp16=True"),
    ({"allow_drift": True, "verify": False}, kiln.InvalidArgument, "allow_drift needs the"),
    ({"verify_full": True, "verify": False}, kiln.InvalidArgument, "verify_full needs the"),
    ({"device": "tpu"}, kiln.Unsupported, "unknown device 'tpu'"),
    ({"optimize": False, "dump_after": "fold_constants"}, kiln.InvalidArgument, "needs the optim"),
    ({"dump_after": "nope"}, kiln.InvalidArgument, "unknown pass 'nope'"),
    ({"target": "cpu:"}, kiln.InvalidArgument, "malformed feature"),
])
def test_bad_options_are_clear_errors(demo, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        kiln.compile(demo, tmp_path / "e.kiln", **kwargs)
    assert not (tmp_path / "e.kiln").exists()


def test_bad_models_are_clear_errors(demo, tmp_path):
    with pytest.raises(kiln.NotFound, match="missing.onnx"):
        kiln.compile(tmp_path / "missing.onnx", tmp_path / "e.kiln")
    engine = kiln.compile(demo, tmp_path / "d.kiln").engine_path
    with pytest.raises(kiln.InvalidArgument, match="already a compiled Kiln engine"):
        kiln.compile(engine, tmp_path / "e.kiln")
    with pytest.raises(kiln.InvalidArgument, match="would overwrite the model"):
        kiln.compile(demo, demo)
    with pytest.raises(kiln.InvalidArgument):
        kiln.compile(b"not an onnx model", tmp_path / "e.kiln")
    with pytest.raises(TypeError, match="model is a path, bytes or an onnx.ModelProto"):
        kiln.compile(42, tmp_path / "e.kiln")


def test_c_abi_errors_through_ctypes(libkiln, tmp_path):
    missing, out = str(tmp_path / "missing.onnx"), str(tmp_path / "e.kiln")
    status, message = c_compile(libkiln, missing, out, [])
    assert status == 2 and "missing.onnx" in message  # KILN_NOT_FOUND
    opts = ctypes.c_void_p()
    assert libkiln.kiln_compile_options_create(ctypes.byref(opts)) == 0
    assert libkiln.kiln_compile_options_add_shape(opts, b"image:1xx3") == 1  # KILN_INVALID_ARGUMENT
    assert "is not a number or MIN..MAX" in libkiln.kiln_last_error_message().decode()
    libkiln.kiln_compile_options_destroy(opts)


def c_compile_npz(lib, model, output, npz_paths):
    """kiln_compile checking on .npz calibration files: (status, message or report)."""
    opts, result = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.kiln_compile_options_create(ctypes.byref(opts)) == 0
    try:
        for path in npz_paths:
            assert lib.kiln_compile_options_set_config(opts, b"calibration_npz",
                                                       str(path).encode()) == 0
        status = lib.kiln_compile(model.encode(), output.encode(), opts, ctypes.byref(result))
        if status != 0:
            return status, lib.kiln_last_error_message().decode()
        text = ctypes.c_char_p()
        assert lib.kiln_compile_result_report(result, ctypes.byref(text)) == 0
        report = text.value.decode()
        lib.kiln_compile_result_destroy(result)
        return status, report
    finally:
        lib.kiln_compile_options_destroy(opts)


def gate_line(report):
    # The gate's own time ("... in 0.01 s") differs from run to run: the numbers before it must not.
    line = next(line for line in report.splitlines() if line.startswith("precision gate:"))
    return re.sub(r" in [0-9.]+ s$", "", line)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_c_reads_npz_calibration_as_python_reads_the_arrays(save, demo, libkiln, tmp_path):
    rng = np.random.default_rng(11)
    sets = [{"image": rng.standard_normal((n, 3, 8, 8)).astype(np.float32)} for n in (3, 1)]
    paths = [tmp_path / f"s{i}.npz" for i in range(2)]
    for path, arrays in zip(paths, sets):
        save(path, **arrays)
    status, report = c_compile_npz(libkiln, demo, str(tmp_path / "c.kiln"), paths)
    assert status == 0, report
    # The same numbers as on the arrays themselves: the .npz reader read them right.
    want = kiln.compile(demo, tmp_path / "p.kiln", calibration=sets).report
    assert gate_line(report) == gate_line(want)
    assert "PASS on 2 calibration input sets" in gate_line(report)


def test_npz_errors_name_the_file_and_array(demo, libkiln, tmp_path):
    out = str(tmp_path / "e.kiln")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip file at all, not even close")
    status, message = c_compile_npz(libkiln, demo, out, [tmp_path / "junk.npz"])
    assert status == 1 and "junk.npz: not a readable .npz file" in message
    np.savez(tmp_path / "big.npz", image=np.zeros((1, 3, 8, 8), dtype=">f4"))
    status, message = c_compile_npz(libkiln, demo, out, [tmp_path / "big.npz"])
    assert status == 3 and "array 'image'" in message and "'>f4'" in message  # KILN_UNSUPPORTED
    np.savez(tmp_path / "obj.npz", image=np.array([{"a": 1}], dtype=object))
    status, message = c_compile_npz(libkiln, demo, out, [tmp_path / "obj.npz"])
    assert status == 3 and "array 'image'" in message
    np.savez(tmp_path / "typo.npz", imag=np.zeros((1, 3, 8, 8), np.float32))
    status, message = c_compile_npz(libkiln, demo, out, [tmp_path / "typo.npz"])
    assert status == 2 and "no input named 'imag'" in message
    status, message = c_compile_npz(libkiln, demo, out, [tmp_path / "none.npz"])
    assert status == 2 and "none.npz" in message
    assert not os.path.exists(out)


def test_precision_keyword_is_checked(demo, tmp_path):
    with pytest.raises(kiln.InvalidArgument, match="precision takes"):
        kiln.compile(demo, tmp_path / "a.kiln", precision="int3")
    with pytest.raises(kiln.InvalidArgument, match="contradicts"):
        kiln.compile(demo, tmp_path / "b.kiln", fp16=True, precision="bf16")
