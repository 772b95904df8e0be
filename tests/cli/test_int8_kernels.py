"""Static INT8 QDQ models through the kiln command: the QDQ patterns fold into int8 nodes that run
on oneDNN's int8 kernels (`kiln profile` names them), the engine keeps them, and `kiln compile`'s
gate passes them at its int8 tolerance. Numerics against the reference path are in
tests/python/test_int8_kernels.py."""
import re

import make_qdq_models as qdq


def node_kernels(stdout):
    """op type -> set of kernels from `kiln profile`'s node table."""
    table = stdout.split("\nnode ", 1)[1].split("\n\n", 1)[0]
    kernels = {}
    for line in table.splitlines()[1:]:
        m = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)\s+([\d.]+)\s+[\d.]+%", line)
        if m:
            kernels.setdefault(m.group(2), set()).add(m.group(3))
    return kernels


def test_profile_shows_the_int8_kernels(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    r = kiln("profile", model, "--iterations", 2)
    assert r.returncode == 0, r.stderr
    kernels = node_kernels(r.stdout)
    assert kernels.get("FusedQLinearConv") == {"cpu:onednn.qlinear_conv"}, r.stdout
    assert kernels.get("QuantizeLinear") == {"cpu:cpu.quantize_linear"}, r.stdout
    assert not any("reference" in k for ks in kernels.values() for k in ks), r.stdout
    assert "Conv" not in kernels and "DequantizeLinear" not in kernels, r.stdout

    gemm = qdq.gemm(tmp_path / "gemm.onnx")
    r = kiln("profile", gemm, "--iterations", 2)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("FusedQLinearMatMul") == {"cpu:onednn.qlinear_matmul"}


def test_unoptimized_runs_the_reference_path(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    r = kiln("profile", model, "--no-optimize", "--iterations", 1)
    assert r.returncode == 0, r.stderr
    kernels = node_kernels(r.stdout)
    assert "FusedQLinearConv" not in kernels and "Conv" in kernels, r.stdout


def test_engine_keeps_the_int8_nodes_and_passes_the_gate(kiln, tmp_path):
    model = qdq.chain(tmp_path / "chain.onnx")
    engine = tmp_path / "chain.kiln"
    r = kiln("compile", model, "-o", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "int8 nodes" in r.stdout and "precision gate: pass" in r.stdout.lower(), r.stdout
    ops = kiln("inspect", engine).stdout
    assert re.search(r"ai\.kiln\.FusedQLinearConv +3\b", ops), ops
    r = kiln("profile", engine, "--iterations", 1)
    assert r.returncode == 0, r.stderr
    assert node_kernels(r.stdout).get("FusedQLinearConv") == {"cpu:onednn.qlinear_conv"}


def test_weight_zero_point_is_left_to_the_reference_path(kiln, tmp_path):
    model = qdq.conv(tmp_path / "conv.onnx", w_zero=2)
    r = kiln("profile", model, "--iterations", 1)
    assert r.returncode == 0, r.stderr
    kernels = node_kernels(r.stdout)
    assert "FusedQLinearConv" not in kernels, r.stdout
    assert "FusedConv" in kernels or "Conv" in kernels, r.stdout
