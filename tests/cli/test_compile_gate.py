"""The precision gate of kiln compile: checked engines are written, drifting ones refused."""
import re
import time

import numpy as np
from onnx import numpy_helper

CORRUPT = {"KILN_TEST_CORRUPT_WEIGHT": "conv_w"}


def blames_the_conv(stderr):
    """The corrupted conv_w is read by Conv #0: the gate names it as the first drifting node or,
    when the compiled graph fused its output away (FusedConv), as where the drift may start."""
    line = re.search(r"first drifting node: (.*)", stderr).group(1)
    return line.startswith("Conv #0 (output 'conv'") or "may start earlier, in Conv #0" in line


def leftovers(tmp_path):
    return [p.name for p in tmp_path.iterdir() if p.name.endswith(".unverified")]


def test_gate_checks_low_and_high_end_of_ranges(kiln, demo, tmp_path):
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--shape-range", "image:2..6x3x8x8")
    assert r.returncode == 0, r.stderr
    assert "precision gate: PASS on 2 input sets" in r.stdout
    assert (tmp_path / "d.kiln").exists() and not leftovers(tmp_path)
    r = kiln("compile", demo, "-o", tmp_path / "e.kiln", "--seed", 3)
    assert r.returncode == 0 and "precision gate: PASS on 1 input set, seed 3" in r.stdout


def test_gate_refuses_a_drifting_engine_and_names_the_node(kiln, demo, tmp_path):
    engine = tmp_path / "d.kiln"
    r = kiln("compile", demo, "-o", engine, env=CORRUPT)
    assert r.returncode == 1
    assert "precision gate: output 'probs' drifts" in r.stderr
    assert blames_the_conv(r.stderr), r.stderr
    assert "not written" in r.stderr and "--allow-drift" in r.stderr
    assert not engine.exists() and not leftovers(tmp_path)
    # The table of what drifted is on stdout.
    assert "probs" in r.stdout and "FAIL" in r.stdout


def test_allow_drift_writes_with_a_warning(kiln, demo, tmp_path):
    engine = tmp_path / "d.kiln"
    r = kiln("compile", demo, "-o", engine, "--allow-drift", env=CORRUPT)
    assert r.returncode == 0, r.stderr
    assert "warning: precision gate" in r.stderr and blames_the_conv(r.stderr)
    assert engine.exists() and not leftovers(tmp_path)


def test_no_verify_skips_the_gate_and_says_so(kiln, demo, tmp_path):
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--no-verify", env=CORRUPT)
    assert r.returncode == 0, r.stderr
    assert "precision gate: skipped (--no-verify)" in r.stdout


def test_tolerance_flag_moves_the_gate(kiln, demo, tmp_path):
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--max-rel-l2", "0.5", env=CORRUPT)
    assert r.returncode == 0, r.stderr
    assert "precision gate: PASS" in r.stdout


def test_gate_on_user_inputs(kiln, demo, tmp_path):
    rng = np.random.default_rng(5)
    sets = tmp_path / "calib"
    for k, batch in enumerate([1, 4]):
        (sets / f"set_{k}").mkdir(parents=True)
        x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        # Matched by the name inside the TensorProto (ONNX test-data style file names).
        (sets / f"set_{k}" / "input_0.pb").write_bytes(
            numpy_helper.from_array(x, "image").SerializeToString())
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--calibration-inputs", sets)
    assert r.returncode == 0, r.stderr
    assert f"PASS on 2 input sets from {sets}" in r.stdout
    r = kiln("compile", demo, "-o", tmp_path / "e.kiln", "--calibration-inputs", sets, env=CORRUPT)
    assert r.returncode == 1 and blames_the_conv(r.stderr)

    # A single directory of NAME.pb files is one set; --input gives one input directly.
    one = tmp_path / "one"
    one.mkdir()
    (one / "image.pb").write_bytes((sets / "set_1" / "input_0.pb").read_bytes())
    r = kiln("compile", demo, "-o", tmp_path / "f.kiln", "--calibration-inputs", one)
    assert r.returncode == 0 and "PASS on 1 input set from" in r.stdout
    r = kiln("compile", demo, "-o", tmp_path / "g.kiln", "--input", f"image={one / 'image.pb'}")
    assert r.returncode == 0 and "with the --input files" in r.stdout

    (one / "label.pb").write_bytes(numpy_helper.from_array(np.zeros(1, np.int64)).SerializeToString())
    r = kiln("compile", demo, "-o", tmp_path / "h.kiln", "--calibration-inputs", one)
    assert r.returncode == 1 and "names no input of the model" in r.stderr
    assert not (tmp_path / "h.kiln").exists() and not leftovers(tmp_path)


def test_gate_error_when_the_reference_cannot_run_the_inputs(kiln, demo, tmp_path):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(numpy_helper.from_array(np.zeros((1, 3, 8), np.float32)).SerializeToString())
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--input", f"image={bad}")
    assert r.returncode == 1
    assert "precision gate: running input set 1" in r.stderr and "--no-verify" in r.stderr
    assert not (tmp_path / "d.kiln").exists() and not leftovers(tmp_path)


def test_gate_does_not_hold_random_outputs_to_the_tolerance(kiln, tmp_path):
    import cli_models
    model = cli_models.random_noise(tmp_path / "noise.onnx")
    r = kiln("compile", model, "-o", tmp_path / "n.kiln")
    assert r.returncode == 0, r.stderr
    assert "y not checked: computed from the random op RandomUniformLike 'noise'" in r.stdout
    assert re.search(r"z \d\.\de[+-]\d\d", r.stdout)
    r = kiln("verify", tmp_path / "n.kiln", "--reference", "interpreter")
    assert r.returncode == 0 and "SKIP (computed from the random op" in r.stdout


def test_gate_generates_sequence_inputs(kiln, tmp_path):
    import cli_models
    model = cli_models.sequence_input(tmp_path / "seq.onnx")
    r = kiln("compile", model, "-o", tmp_path / "s.kiln")
    assert r.returncode == 0, r.stderr
    assert "precision gate: PASS" in r.stdout


def constant_loop(path, trips):
    """Y = X + trips through a Loop whose trip count is a constant: 2^62 never ends."""
    import onnx
    import onnx.helper as oh
    from onnx import TensorProto as T
    body = oh.make_graph(
        [oh.make_node("Identity", ["cond"], ["cond_out"]),
         oh.make_node("Add", ["v", "one"], ["v_out"])], "body",
        [oh.make_tensor_value_info("iter", T.INT64, []),
         oh.make_tensor_value_info("cond", T.BOOL, []),
         oh.make_tensor_value_info("v", T.FLOAT, [1])],
        [oh.make_tensor_value_info("cond_out", T.BOOL, []),
         oh.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    g = oh.make_graph(
        [oh.make_node("Loop", ["M", "", "X"], ["Y"], body=body)], "constant_loop",
        [oh.make_tensor_value_info("X", T.FLOAT, [1])],
        [oh.make_tensor_value_info("Y", T.FLOAT, [1])],
        [numpy_helper.from_array(np.array(trips, np.int64), "M")])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_gate_stops_at_its_time_budget(kiln, tmp_path):
    model = tmp_path / "loop.onnx"
    constant_loop(model, 2 ** 62)
    engine = tmp_path / "loop.kiln"
    t0 = time.time()
    r = kiln("compile", model, "-o", engine, "--verify-timeout", "0.5")
    assert time.time() - t0 < 30
    assert r.returncode == 1, r.stderr
    assert "precision gate: stopped at its time budget of 0.5 s" in r.stderr, r.stderr
    assert "--verify-timeout" in r.stderr and "--no-verify" in r.stderr
    assert not engine.exists() and not leftovers(tmp_path)
    # A loop that ends well within the budget passes the gate as before.
    constant_loop(model, 1000)
    r = kiln("compile", model, "-o", engine, "--verify-timeout", "60")
    assert r.returncode == 0 and "precision gate: PASS" in r.stdout, r.stderr


def test_gate_runs_a_costly_top_of_range_on_the_engine_alone(kiln, tmp_path):
    """The reference at the top of 1..64 (~1.2 G FLOPs) is over the gate's budget (1 G): the
    gate compares the low end and the largest size inside the range that fits with the
    reference, and runs the engine alone at the top; --verify-full compares the top too."""
    import cli_models
    model = cli_models.wide_conv(tmp_path / "wide.onnx")
    r = kiln("compile", model, "-o", tmp_path / "w.kiln", "--shape-range", "x:1..64x32x32x32")
    assert r.returncode == 0, r.stderr
    m = re.search(r"PASS on 3 input sets \(n=1 and n=(\d+) against the reference; n=64, the top "
                  r"of the dim ranges, on the engine alone", r.stdout)
    assert m, r.stdout
    assert 1 < int(m.group(1)) < 64
    assert re.search(r"of the reference \(worst relative L2: y [^)]*\) in \d+\.\d\d s", r.stdout)
    assert (tmp_path / "w.kiln").exists() and not leftovers(tmp_path)

    r = kiln("compile", model, "-o", tmp_path / "f.kiln", "--shape-range", "x:1..64x32x32x32",
             "--verify-full")
    assert r.returncode == 0, r.stderr
    assert "PASS on 2 input sets (dim ranges at their low and high ends)" in r.stdout
    r = kiln("compile", model, "-o", tmp_path / "g.kiln", "--verify-full", "--no-verify")
    assert r.returncode != 0 and "excludes" in r.stderr


def test_gate_compares_a_cheap_top_of_range_with_the_reference(kiln, tmp_path):
    import cli_models
    model = cli_models.wide_conv(tmp_path / "wide.onnx")
    r = kiln("compile", model, "-o", tmp_path / "w.kiln", "--shape-range", "x:1..8x32x32x32")
    assert r.returncode == 0, r.stderr
    assert "PASS on 2 input sets (dim ranges at their low and high ends)" in r.stdout
