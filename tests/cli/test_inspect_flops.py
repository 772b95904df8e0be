"""kiln inspect: FLOPs, parameters and Graphviz output."""
import re
import shutil
import subprocess

import pytest

import cli_models


def demo_flops(batch):
    conv = 2 * batch * 8 * 8 * 8 * (3 * 3 * 3) + batch * 8 * 8 * 8  # multiply-adds + bias
    relu = batch * 8 * 8 * 8
    pool = batch * 8 * 4 * 4 * (2 * 2)
    gemm = 2 * batch * 10 * 128 + batch * 10
    softmax = batch * 10
    return conv + relu + pool + gemm + softmax


@pytest.mark.parametrize("batch", [1, 3])
def test_inspect_counts_flops(kiln, demo, batch):
    args = ["inspect", demo] + (["--dim", f"batch={batch}"] if batch != 1 else [])
    r = kiln(*args)
    assert r.returncode == 0, r.stderr
    assert f"FLOPs at batch={batch}: " in r.stdout
    total = int(re.search(r"^FLOPs at batch=\d+: (\d+) ", r.stdout, re.M).group(1))
    assert total == demo_flops(batch)
    assert re.search(r"^  Conv +\S+ K +8\d\.\d%$", r.stdout, re.M)


def test_inspect_matmul_flops_and_engine(kiln, tmp_path):
    model = cli_models.mlp(tmp_path / "mlp.onnx")
    r = kiln("inspect", model, "--dim", "n=10")
    assert r.returncode == 0, r.stderr
    total = int(re.search(r"^FLOPs at n=10: (\d+) ", r.stdout, re.M).group(1))
    assert total == 2 * 10 * 4 * 5 + 10 * 5 + 10 * 5 + 2 * 10 * 5 * 3
    assert "parameters: 40 " in r.stdout  # 4*5 + 5 + 5*3
    assert kiln("compile", model, "-o", tmp_path / "mlp.kiln").returncode == 0
    r = kiln("inspect", tmp_path / "mlp.kiln", "--dim", "n=10")
    assert r.returncode == 0 and f"FLOPs at n=10: {total} " in r.stdout


def test_inspect_writes_graphviz(kiln, demo, tmp_path):
    dot = tmp_path / "g.dot"
    r = kiln("inspect", demo, "--dot", dot)
    assert r.returncode == 0, r.stderr
    text = dot.read_text()
    assert text.startswith("digraph") and text.rstrip().endswith("}")
    for op in ("Conv", "Relu", "MaxPool", "Flatten", "Gemm", "Softmax"):
        assert f'label="{op}' in text
    assert text.count("->") == 7  # image->Conv, 5 node-to-node edges, Softmax->probs
    if shutil.which("dot"):
        svg = subprocess.run(["dot", "-Tsvg", str(dot)], capture_output=True, check=True).stdout
        assert b"<svg" in svg
