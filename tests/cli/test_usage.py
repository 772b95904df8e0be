"""Every kiln command: --help, the exit codes (0 ok, 1 failure, 2 usage) and clear errors."""
import pytest

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
    ["bench", "{demo}", "--iterations", "5", "--duration", "1"],
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
    r = kiln("bench", demo, "--iterations", 3)
    assert r.returncode == 0 and r.stderr == ""


def test_progress_bar_when_stderr_is_a_terminal(kiln, demo, request):
    import os
    import pty
    import subprocess
    path = os.path.abspath(request.config.getoption("--kiln"))
    master, slave = pty.openpty()
    try:
        p = subprocess.run([path, "bench", str(demo), "--iterations", "200"], stdout=subprocess.PIPE,
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
