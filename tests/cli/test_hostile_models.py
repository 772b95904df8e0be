"""Models built to cost what they do not hold: every command refuses them (or loads them) having
read only what is there, with errors that name the tensor and file; models real exporters write
load; and nesting or a damaged engine magic is named as such."""
import os
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

# What a refusal may cost: the process itself is about 100 MB.
MAX_RSS = 200 << 20


@pytest.fixture
def measure(request):
    path = os.path.abspath(request.config.getoption("--kiln"))

    def run(*args, timeout=120):
        start = time.monotonic()
        p = subprocess.Popen([path, *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        deadline = start + timeout
        # Drain the pipes from threads so a chatty child cannot block, then reap it with wait4,
        # which reports this child's own peak RSS (RUSAGE_CHILDREN would keep earlier ones).
        chunks = {"out": b"", "err": b""}

        def drain(stream, key):
            chunks[key] = stream.read()

        threads = [threading.Thread(target=drain, args=(p.stdout, "out")),
                   threading.Thread(target=drain, args=(p.stderr, "err"))]
        for t in threads:
            t.start()
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                raise AssertionError(f"kiln {args} ran past {timeout} s")
            time.sleep(0.01)
        for t in threads:
            t.join()
        p.returncode = os.waitstatus_to_exitcode(status)
        return (p.returncode, chunks["out"].decode(), chunks["err"].decode(),
                usage.ru_maxrss * 1024, time.monotonic() - start)

    return run


def save_add_model(path, w):
    """y = x + w for x: float[4] and the initializer w (a TensorProto built by the caller)."""
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())  # onnx.save would load the external data


def no_data_model(path):
    """73 bytes declaring a 6 GiB initializer that holds no data."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 512 << 20])
    save_add_model(path, w)


def external_model(path, location, **keys):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4],
                    data_location=TensorProto.EXTERNAL)
    for k, v in {"location": location, **keys}.items():
        e = w.external_data.add()
        e.key, e.value = k, str(v)
    save_add_model(path, w)


@pytest.mark.parametrize("command", ["inspect", "run", "compile"])
def test_declared_size_without_data_is_refused_cheaply(measure, tmp_path, command):
    model = tmp_path / "big.onnx"
    no_data_model(model)
    assert os.path.getsize(model) < 100
    code, out, err, rss, _ = measure(command, model)
    assert code == 1, out + err
    assert ("initializer 'w': declares float[3,536870912] (6442450944 bytes) but holds no data"
            in err), err
    assert rss < MAX_RSS, f"peak RSS {rss >> 20} MB"


@pytest.mark.parametrize("command", ["inspect", "run", "compile"])
def test_external_directory_is_refused(measure, tmp_path, command):
    model = tmp_path / "m" / "model.onnx"
    external_model(model, ".")
    code, out, err, rss, _ = measure(command, model)
    assert code == 1, out + err
    assert (f"initializer 'w': external data location '.', '{tmp_path / 'm'}' is a directory, "
            "not a regular file") in err, err
    assert rss < MAX_RSS, f"peak RSS {rss >> 20} MB"


def test_sparse_external_file_reads_only_the_tensor(measure, tmp_path):
    """A 4 GiB (sparse) file for a float[4]: the 16 bytes are read, not the file."""
    model = tmp_path / "m" / "model.onnx"
    external_model(model, "w.bin")
    with open(tmp_path / "m" / "w.bin", "wb") as f:
        f.write(np.array([1, 2, 3, 4], np.float32).tobytes())
        f.truncate(4 << 30)
    x = tmp_path / "x.pb"
    x.write_bytes(numpy_helper.from_array(np.full(4, 10, np.float32), "x").SerializeToString())
    code, out, err, rss, seconds = measure("run", model, "--input", f"x={x}")
    assert code == 0, err
    assert "output y: float[4]  min 11 max 14" in out, out
    assert rss < MAX_RSS and seconds < 10, (rss >> 20, seconds)
    code, out, err, rss, _ = measure("inspect", model)
    assert code == 0 and rss < MAX_RSS, (err, rss >> 20)
    # A length that disagrees with the tensor is refused before anything is read.
    external_model(model, "w.bin", length=4 << 30)
    code, out, err, rss, _ = measure("run", model)
    assert code == 1 and rss < MAX_RSS, (out, rss >> 20)
    assert ("initializer 'w': external data length 4294967296 in 'w.bin' does not match the 16 "
            "bytes the tensor declares") in err, err


def test_model_path_must_be_a_regular_file(kiln, tmp_path):
    os.mkfifo(tmp_path / "fifo.onnx")
    for command in ("inspect", "run", "compile"):
        r = kiln(command, tmp_path / "fifo.onnx")  # a fifo used to block the open forever
        assert r.returncode == 1, (command, r.stdout)
        assert f"model file '{tmp_path / 'fifo.onnx'}' is a fifo, not a regular file" in r.stderr
        r = kiln(command, tmp_path)  # the flag parser refuses a directory as a usage error
        assert r.returncode == 2 and "directory" in r.stderr, (command, r.stderr)


def test_dim_value_minus_one_runs_like_onnxruntime(kiln, tmp_path):
    """paddle2onnx writes dim_value -1 for dynamic dims; onnxruntime treats them as such."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])], "g", [x_info], [y_info],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
        value_info=[helper.make_tensor_value_info("xw", TensorProto.FLOAT, [-1, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    onnx.save(m, tmp_path / "paddle.onnx")
    x = rng.standard_normal((5, 4)).astype(np.float32)
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    for args in ([], ["--no-optimize"]):
        r = kiln("run", tmp_path / "paddle.onnx", "--input", f"x={tmp_path / 'x.pb'}",
                 "--output-dir", tmp_path / "out", *args)
        assert r.returncode == 0, r.stderr
        got = numpy_helper.to_array(onnx.load_tensor(str(tmp_path / "out" / "y.pb")))
        want = ort.InferenceSession(str(tmp_path / "paddle.onnx"),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert got.shape == (5, 3)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    r = kiln("compile", tmp_path / "paddle.onnx", "-o", tmp_path / "paddle.kiln")
    assert r.returncode == 0, r.stderr


def _varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def _field(number, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def nested_if_model(path, depth):
    """y = If(c) { If(c) { ... Identity(x) ... } } `depth` levels deep; else branches Identity.
    The nesting is written on the wire by hand: the protobuf Python library refuses to build or
    serialize messages nested past its own recursion limit."""
    def body(name, out):
        return helper.make_graph([helper.make_node("Identity", ["x"], [out])], name, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3])])
    graph = body(f"then{depth}", f"y{depth}").SerializeToString()
    for i in range(depth - 1, -1, -1):
        out = "y" if i == 0 else f"y{i}"
        node = helper.make_node("If", ["c"], [out], else_branch=body(f"else{i}", f"e{i}"))
        then = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH)
        node_bytes = node.SerializeToString() + _field(5, then.SerializeToString() +
                                                       _field(6, graph))  # attribute.g
        outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3])]
        inputs = [] if i else [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
        shell = helper.make_graph([], "g" if i == 0 else f"then{i - 1}", inputs, outputs)
        graph = shell.SerializeToString() + _field(1, node_bytes)  # graph.node
    m = helper.make_model(helper.make_graph([], "unused", [], []),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m.ClearField("graph")
    with open(path, "wb") as f:
        f.write(m.SerializeToString() + _field(7, graph))  # model.graph


def test_deep_subgraphs_are_named_not_called_corrupt(kiln, tmp_path):
    nested_if_model(tmp_path / "deep60.onnx", 60)
    r = kiln("run", tmp_path / "deep60.onnx")  # protobuf's default limit refused it as corrupt
    assert r.returncode == 0, r.stderr
    assert "output y: float[3]" in r.stdout
    nested_if_model(tmp_path / "deep100.onnx", 100)
    for command in ("inspect", "run", "compile"):
        r = kiln(command, tmp_path / "deep100.onnx")
        assert r.returncode == 1
        assert "subgraphs nest deeper than 64 levels" in r.stderr, r.stderr
        assert "corrupt" not in r.stderr


def test_engine_with_damaged_magic_is_named(kiln, tmp_path, demo):
    assert kiln("compile", demo, "-o", tmp_path / "demo.kiln").returncode == 0
    data = bytearray((tmp_path / "demo.kiln").read_bytes())
    data[:8] = b"KILNENG0"
    for name in ("bad.kiln", "bad.onnx"):  # told by its header, not its name
        (tmp_path / name).write_bytes(bytes(data))
        for command in ("run", "inspect"):
            r = kiln(command, tmp_path / name)
            assert r.returncode == 1
            assert ("not a Kiln engine file (bad magic 'KILNENG0', expected 'KILNENG1')"
                    in r.stderr), r.stderr
            assert "protobuf" not in r.stderr
    r = kiln("compile", tmp_path / "bad.onnx")
    assert r.returncode == 1 and "bad magic 'KILNENG0'" in r.stderr, r.stderr
    # A .kiln of neither kind says what it lacks as an engine, then as ONNX.
    (tmp_path / "junk.kiln").write_bytes(b"\x00" * 100)
    r = kiln("run", tmp_path / "junk.kiln")
    assert r.returncode == 1
    assert "not a Kiln engine file (bad magic '\\x00" in r.stderr, r.stderr
    assert "read as ONNX instead: " in r.stderr
