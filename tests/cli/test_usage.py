"""Every kiln command: --help, the exit codes (0 ok, 1 failure, 2 usage) and clear errors."""
import re

import pytest

import cli_models

COMMANDS = ["compile", "run", "verify", "bench", "profile", "inspect"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(kiln, command):
    r = kiln(command, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage:" in r.stdout and "--help" in r.stdout


def test_top_level_help_lists_commands_and_exit_codes(kiln):
    r = kiln("--help")
    assert r.returncode == 0
    for command in COMMANDS:
        assert command in r.stdout
    assert "2 usage error" in r.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_model_file_is_a_usage_error(kiln, tmp_path, command):
    r = kiln(command, tmp_path / "nope.onnx")
    assert r.returncode == 2
    assert "nope.onnx" in r.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_malformed_model_is_a_failure_with_a_clear_message(kiln, demo, command):
    data = demo.read_bytes()
    cut = demo.parent / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    r = kiln(command, cut)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not a valid ONNX model" in r.stderr
    assert "cut.onnx" in r.stderr


@pytest.mark.parametrize("args", [
    ["run", "{demo}", "--no-such-flag"],
    ["run", "{demo}", "--dim", "batch"],
    ["run", "{demo}", "--dim", "batch=two"],
    ["run", "{demo}", "--input", "image"],
    ["run", "{demo}", "--repeat", "0"],
    ["verify", "{demo}", "--reference", "tensorflow"],
    ["verify", "{demo}", "--max-rel-l2", "-1"],
    ["bench", "{demo}", "--iterations", "0"],
    ["bench", "{demo}", "--duration", "-1"],
    ["bench", "{demo}", "--batch", "0"],
    ["profile", "{demo}", "--iterations", "x"],
    ["inspect", "{demo}", "--dim", "=3"],
    ["compile", "{demo}", "--no-verify", "--allow-drift"],
    ["compile", "{demo}", "--calibration-inputs", "{missing}"],
    ["compile", "{demo}", "--no-optimize", "--dump-after", "fold_constants"],
])
def test_bad_flags_are_usage_errors(kiln, demo, tmp_path, args):
    args = [a.format(demo=demo, missing=tmp_path / "missing") for a in args]
    r = kiln(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip(), "a usage error says what is wrong"


def test_no_progress_bar_when_not_a_terminal(kiln, demo):
    r = kiln("bench", demo, "--iterations", 3, "--duration", 0)
    # stderr holds at most the noise warning, never a progress bar.
    assert r.returncode == 0 and "bench [" not in r.stderr and "\r" not in r.stderr


def test_progress_bar_when_stderr_is_a_terminal(kiln, demo, request):
    import os
    import pty
    import subprocess
    path = os.path.abspath(request.config.getoption("--kiln"))
    master, slave = pty.openpty()
    try:
        p = subprocess.run([path, "bench", str(demo), "--iterations", "200", "--duration", "0"],
                           stdout=subprocess.PIPE,
                           stderr=slave, timeout=120)
        os.close(slave)
        slave = None
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert p.returncode == 0
    assert b"bench [" in seen and b"\r" in seen
    assert b"bench [" not in p.stdout  # the results stay clean


# Typos are errors: an unknown name is refused, naming it, listing or pointing to the valid ones
# and suggesting the closest; nothing runs.

def test_top_level_help_lists_serve(kiln):
    r = kiln("--help")
    assert r.returncode == 0
    assert re.search(r"^\s+serve\s+Run the inference server", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("command", ["run", "bench", "profile", "verify", "inspect"])
def test_unknown_dim_name_is_refused(kiln, demo, command):
    r = kiln(command, demo, "--dim", "batc=2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "kiln: --dim batc=2: the model has no dim named 'batc'; did you mean 'batch'? " \
        "(its dims: 'batch')" in r.stderr
    assert "output" not in r.stdout and "latency" not in r.stdout


def test_dim_name_of_a_model_without_symbolic_dims(kiln, tmp_path):
    model = cli_models.conv_bn(tmp_path / "m.onnx")  # x: float[1,2,6,6]
    r = kiln("run", model, "--dim", "batch=2")
    assert r.returncode == 2
    assert "--dim batch=2: the model has no symbolic dims" in r.stderr


def test_known_dim_name_still_works(kiln, demo):
    r = kiln("run", demo, "--dim", "batch=2")
    assert r.returncode == 0, r.stderr
    assert "input  image: float[2,3,8,8]" in r.stdout


@pytest.mark.parametrize("word,suggestion", [("comple", "compile"), ("serv", "serve"),
                                             ("bnech", "bench"), ("frobnicate", None)])
def test_unknown_command(kiln, word, suggestion):
    r = kiln(word)
    assert r.returncode == 2
    tail = f"; did you mean '{suggestion}'?" if suggestion else ""
    assert f"kiln: unknown command '{word}'{tail} (commands: " in r.stderr, r.stderr
    for command in COMMANDS + ["serve"]:
        assert f"'{command}'" in r.stderr
    assert "subcommand is required" not in r.stderr


def test_no_command(kiln):
    r = kiln()
    assert r.returncode == 2
    assert "a command is required: 'compile', 'run'" in r.stderr


@pytest.mark.parametrize("args", [
    ["compile", "{demo}", "--shape-rang", "image:1..4x3x8x8"],
    ["compile", "--shape-rang", "image:1..4x3x8x8", "{demo}"],  # before the model: not its path
    ["compile", "{demo}", "--shape-rang=image:1..4x3x8x8"],
])
def test_unknown_option_is_named_with_a_suggestion(kiln, demo, args):
    r = kiln(*[a.format(demo=demo) for a in args])
    assert r.returncode == 2
    assert r.stderr.startswith(
        "kiln: unknown option '--shape-rang' for 'kiln compile'; did you mean '--shape-range'? "
        "(`kiln compile --help` lists them)"), r.stderr
    assert "image:1..4" not in r.stderr  # the option, not its value, is what is wrong


@pytest.mark.parametrize("args,option,suggestion", [
    (["run", "{demo}", "--repet", "3"], "--repet", "--repeat"),
    (["bench", "{demo}", "--iter", "3"], "--iter", "--iterations"),  # an abbreviation
    (["profile", "{demo}", "--trcae", "t.json"], "--trcae", "--trace"),
    (["--hlep"], "--hlep", "--help"),
    (["run", "{demo}", "--zzzzzz"], "--zzzzzz", None),
    (["run", "{demo}", "-q"], "-q", None),
])
def test_unknown_options_across_commands(kiln, demo, args, option, suggestion):
    r = kiln(*[a.format(demo=demo) for a in args])
    assert r.returncode == 2
    assert f"unknown option '{option}'" in r.stderr, r.stderr
    if suggestion:
        assert f"did you mean '{suggestion}'?" in r.stderr
    else:
        assert "did you mean" not in r.stderr


def test_negative_numbers_are_values_not_options(kiln, demo):
    # --atol takes no negative value, but "-1" reaches the option's own check.
    r = kiln("verify", demo, "--reference", "interpreter", "--atol", "-1")
    assert r.returncode == 2
    assert "unknown option" not in r.stderr and "--atol" in r.stderr
