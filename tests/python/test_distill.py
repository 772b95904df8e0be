"""kiln.distill: a PyTorch student trained against a teacher that Kiln runs.

`import kiln` must never import torch, and kiln.distill without torch is an ImportError naming the
package to install (both checked in a fresh interpreter, whatever runs the tests). The rest needs
PyTorch in the interpreter that runs the tests and is skipped, saying so, without it: Debian's
python3-torch installs for /usr/bin/python3, not the pyenv python that `make test-python` uses,
so `make test-distill` runs this file with /usr/bin/python3.

The main case is the recipe in small: an MLP classifier (the teacher, an ONNX file Kiln runs)
channel-pruned by kiln.prune, turned into a torch student by student_from_onnx, distilled: its
loss falls and its top-1 agreement with the teacher on held-out inputs rises; the same seed gives
the same steps bit for bit.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from prune_models import residual_cnn  # noqa: E402

try:
    import torch

    NO_TORCH = ""
except ImportError as e:
    torch = None
    NO_TORCH = (f"PyTorch is not importable by {sys.executable} ({e}); kiln.distill needs it: "
                "run this file with an interpreter that has torch (Debian's /usr/bin/python3 "
                "with python3-torch: `make test-distill`)")
needs_torch = pytest.mark.skipif(torch is None, reason=NO_TORCH or "torch present")


def fresh_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ))


def test_import_kiln_does_not_import_torch():
    r = fresh_python("import sys, kiln\n"
                     "kiln.InferenceSession, kiln.compile, kiln.quantize, kiln.prune\n"
                     "assert 'torch' not in sys.modules, 'import kiln imported torch'\n"
                     "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_distill_without_torch_says_what_to_install():
    # sys.modules['torch'] = None makes `import torch` fail as if it were not installed.
    r = fresh_python("import sys\nsys.modules['torch'] = None\nimport kiln\n"
                     "try:\n    kiln.distill\nexcept ImportError as e:\n    print(e)\n"
                     "else:\n    print('no error')")
    assert r.returncode == 0, r.stderr
    assert "kiln.distill needs PyTorch" in r.stdout and "install the 'torch' package" in r.stdout
    assert sys.executable in r.stdout or "interpreter" in r.stdout


def mlp(path, seed=0, features=16, hidden=32, classes=8, batch="N", with_h=True):
    """x [N, 16] -> Gemm (16 -> 32) -> Relu (h, also an output unless with_h=False) -> Gemm
    (32 -> 8) -> logits."""
    rng = np.random.default_rng(seed)
    # The second half of the hidden units are the first half scaled by 0.9 (Relu(0.9 z) =
    # 0.9 Relu(z)): half the units can compute the same logits, with other output weights, and
    # channel pruning by l2 norm removes exactly the scaled copies.
    half = rng.standard_normal((hidden // 2, features))
    half = (half / np.linalg.norm(half, axis=1, keepdims=True)).astype(np.float32)  # l2 prunes
    w1 = np.concatenate([half, 0.9 * half])
    b1 = np.concatenate([[0.1 * rng.standard_normal(hidden // 2)] * 2]).ravel().astype(np.float32)
    b1[hidden // 2:] *= 0.9
    w2 = (3 * rng.standard_normal((classes, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b2 = np.zeros(classes, np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["z"], name="fc1", transB=1),
             helper.make_node("Relu", ["z"], ["h"]),
             helper.make_node("Gemm", ["h", "w2", "b2"], ["logits"], name="fc2", transB=1)]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])] + (
            [helper.make_tensor_value_info("h", TensorProto.FLOAT, [batch, hidden])]
            if with_h else []),
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                    (b2, "b2"))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.save(m, str(path))
    return str(path)


def inputs(n, seed, features=16):
    return np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)


@needs_torch
def test_distill_recovers_a_pruned_mlp(tmp_path):
    import kiln.distill as kd

    torch.set_num_threads(1)
    teacher = mlp(tmp_path / "teacher.onnx", with_h=False)
    pruned = tmp_path / "pruned.onnx"
    kiln.prune(teacher, pruned, method="channels", ratio=0.5, criterion="l2",
               calibration=[{"x": inputs(64, 1)}], min_cosine=0.0, allow_drift=True)
    train, held = {"x": inputs(1024, 2)}, {"x": inputs(512, 3)}

    runs = []
    for _ in range(2):
        student = kd.student_from_onnx(pruned)
        assert sum(p.numel() for p in student.parameters()) == 16 * 16 + 16 + 8 * 16 + 8
        before = kd.evaluate(student, teacher, held, output_name="logits")
        report = kd.distill(student, teacher, train, epochs=12, lr=1e-2, batch_size=64,
                            temperature=2.0, output_name="logits", seed=3, threads=1)
        after = kd.evaluate(student, teacher, held, output_name="logits")
        runs.append((before, report, after))
    before, report, after = runs[0]
    print(report.summary())
    print(before, after, sep="\n")
    assert report.steps == 12 * 16 and report.samples == 12 * 1024
    assert report.stopped == "epochs" and len(report.epochs) == 12
    assert before.top1 < 0.75, "the pruned student should start far from the teacher"
    assert after.top1 >= before.top1 + 0.15 and after.top1 >= 0.85
    assert after.cosine > before.cosine and after.rel_l2 < before.rel_l2
    assert report.loss_end < 0.5 * report.loss_start
    assert report.epochs[-1].loss < report.epochs[0].loss
    assert report.agreement_end > report.agreement_start
    # Deterministic: the same seed gives the same steps.
    assert runs[1][1].losses == report.losses and runs[1][2] == after


@needs_torch
def test_student_from_onnx_matches_kiln_and_exports_back(tmp_path):
    """A pruned CNN (BatchNormalization, depthwise Conv, residual Add, GlobalAveragePool,
    Flatten, Gemm) computes what Kiln computes; export_onnx writes a file Kiln runs alike."""
    import kiln.distill as kd

    torch.set_num_threads(1)
    model = residual_cnn(tmp_path / "cnn.onnx")
    rng = np.random.default_rng(0)
    sets = [{"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(2)]
    kiln.prune(model, tmp_path / "p.onnx", ratio=0.5, calibration=sets, min_cosine=0.0)
    x = rng.standard_normal((5, 3, 16, 16)).astype(np.float32)
    for path in (model, tmp_path / "p.onnx"):
        student = kd.student_from_onnx(path)
        assert student.input_names == ["image"] and student.output_names == ["logits"]
        [want] = kiln.InferenceSession(str(path)).run(None, {"image": x})
        with torch.no_grad():
            got = student(torch.from_numpy(x)).numpy()
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    e = kd.export_onnx(student, tmp_path / "out.onnx", {"image": x[:2]})
    assert e.rel_l2 < 1e-5 and e.input_names == ["image"] and e.output_names == ["logits"]
    [again] = kiln.InferenceSession(e.path).run(None, {"image": x})  # a symbolic batch
    assert np.linalg.norm(again - want) / np.linalg.norm(want) < 1e-5


def batch1_cnn(path):
    """A batch-1 export's shape: Pad (asymmetric, pads an initializer) -> Conv (stride 2) ->
    Clip(0, 6) -> GlobalAveragePool -> Reshape to [1, -1] -> Gemm: EfficientNet-Lite's pieces."""
    rng = np.random.default_rng(5)
    arrays = {"pads": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64),
              "w": (0.3 * rng.standard_normal((8, 3, 3, 3))).astype(np.float32),
              "b": np.zeros(8, np.float32), "lo": np.array(0, np.float32),
              "hi": np.array(6, np.float32), "shape": np.array([1, -1], np.int64),
              "fw": rng.standard_normal((4, 8)).astype(np.float32),
              "fb": np.zeros(4, np.float32)}
    nodes = [helper.make_node("Pad", ["image", "pads"], ["p"], mode="constant"),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], strides=[2, 2]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Reshape", ["g", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1)]
    g = helper.make_graph(
        nodes, "b1", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.save(m, str(path))
    return str(path)


@needs_torch
def test_batch1_teacher_runs_in_pieces_and_the_student_takes_batches(tmp_path):
    import kiln.distill as kd

    torch.set_num_threads(1)
    teacher = batch1_cnn(tmp_path / "b1.onnx")
    student = kd.student_from_onnx(teacher)
    x = np.random.default_rng(1).standard_normal((6, 3, 9, 9)).astype(np.float32)
    same = kd.evaluate(student, teacher, {"image": x}, batch_size=3)  # 3 teacher runs a batch
    assert same.samples == 6 and same.top1 == 1.0 and same.rel_l2 < 1e-5
    with torch.no_grad():
        torch.manual_seed(0)
        for p in student.parameters():
            p.add_(0.3 * torch.randn_like(p))
    r = kd.distill(student, teacher, {"image": x}, epochs=3, batch_size=2, lr=1e-2)
    assert r.steps == 9 and r.teacher_seconds > 0
    e = kd.export_onnx(student, tmp_path / "s.onnx", {"image": x[:1]})
    [got] = kiln.InferenceSession(e.path).run(None, {"image": x})  # batch 6 through [-1, 8]
    assert got.shape == (6, 4)
    folded = onnx.load(e.path)
    assert [n.op_type for n in folded.graph.node] == [
        "Pad", "Conv", "Clip", "GlobalAveragePool", "Reshape", "Gemm"]


@needs_torch
def test_engine_teacher_labels_npz_directory_and_limits(tmp_path):
    import kiln.distill as kd

    torch.set_num_threads(1)
    teacher = mlp(tmp_path / "t.onnx")
    engine = kiln.compile(teacher, tmp_path / "t.kiln", shapes={"x": "1..32x16"}).engine_path
    [logits, _] = kiln.InferenceSession(teacher).run(None, {"x": inputs(96, 4)})
    data = tmp_path / "sets"
    data.mkdir()
    x = inputs(96, 4)
    for i in range(3):  # one directory of .npz sets, each with its hard labels
        np.savez(data / f"set{i}.npz", x=x[i * 32:(i + 1) * 32],
                 label=logits[i * 32:(i + 1) * 32].argmax(1))
    student = kd.student_from_onnx(mlp(tmp_path / "s.onnx", seed=9))
    r = kd.distill(student, engine, str(data), labels="label", alpha=0.5, epochs=50, lr=1e-2,
                   batch_size=16, max_steps=40, seed=1)
    assert r.stopped == "max_steps" and r.steps == 40 and r.loss_end < r.loss_start
    r = kd.distill(student, engine, str(data), labels="label", time_limit=0, batch_size=16)
    assert r.stopped == "time_limit" and r.steps == 1


@needs_torch
def test_feature_losses_with_a_plain_torch_student(tmp_path):
    import kiln.distill as kd

    torch.set_num_threads(1)
    torch.manual_seed(0)
    teacher = mlp(tmp_path / "t.onnx")

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, x):
            return {"h": torch.relu(self.fc(x))}

    for loss in ("mse", "cosine"):
        student = Embed()
        before = kd.evaluate(student, teacher, {"x": inputs(256, 3)}, output_name="h")
        r = kd.distill(student, teacher, {"x": inputs(512, 2)}, loss=loss, output_name="h",
                       epochs=8, lr=1e-2, batch_size=32)
        after = kd.evaluate(student, teacher, {"x": inputs(256, 3)}, output_name="h")
        assert r.loss_end < 0.5 * r.loss_start and r.agreements == []
        assert after.cosine > max(before.cosine, 0.9), (loss, before, after)


@needs_torch
def test_bad_arguments_are_clear_errors(tmp_path):
    import kiln.distill as kd

    teacher = mlp(tmp_path / "t.onnx")
    student = kd.student_from_onnx(teacher)
    data = {"x": inputs(8, 0)}
    with pytest.raises(kiln.InvalidArgument, match="output_name 'nope' is not an output"):
        kd.distill(student, teacher, data, output_name="nope")
    with pytest.raises(kiln.InvalidArgument, match=r"student's output has shape \[8, 8\], the "
                       r"teacher's 'h' \[8, 32\]"):
        kd.distill(torch.nn.Linear(16, 8), teacher, data, output_name="h", loss="mse")
    with pytest.raises(kiln.InvalidArgument, match="one-shot iterator"):
        kd.distill(student, teacher, (d for d in [data]), epochs=2)
    with pytest.raises(kiln.InvalidArgument, match="labels go with loss='kl'"):
        kd.distill(student, teacher, data, labels="y", loss="mse")
    with pytest.raises(kiln.InvalidArgument, match=r"\['y'\] are not inputs of the teacher"):
        kd.distill(student, teacher, {"x": inputs(8, 0), "y": inputs(8, 0)})
    with pytest.raises(kiln.InvalidArgument, match="temperature must be"):
        kd.distill(student, teacher, data, temperature=0)
    with pytest.raises(kiln.NotFound):
        kd.distill(student, teacher, [str(tmp_path / "missing.npz")])
    with pytest.raises(TypeError, match="student is a torch.nn.Module"):
        kd.distill(object(), teacher, data)
    r = kd.distill(student, teacher, (d for d in [data, data]), batch_size=None)  # one epoch
    assert r.steps == 2 and r.stopped == "epochs"
    unsupported = tmp_path / "topk.onnx"
    g = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 1])],
                          [numpy_helper.from_array(np.array([1], np.int64), "k")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(unsupported))
    with pytest.raises(kiln.Unsupported, match=r"'top' \(TopK\)"):
        kd.student_from_onnx(unsupported)


@needs_torch
def test_python_m_kiln_distill(tmp_path):
    """The command line: an ONNX student in, the distilled ONNX out, scores before and after."""
    teacher = mlp(tmp_path / "t.onnx", with_h=False)
    kiln.prune(teacher, tmp_path / "p.onnx", method="channels", ratio=0.5, criterion="l2",
               calibration=[{"x": inputs(64, 1)}], min_cosine=0.0, allow_drift=True)
    np.savez(tmp_path / "train.npz", x=inputs(1024, 2))
    np.savez(tmp_path / "held.npz", x=inputs(512, 3))
    r = subprocess.run([sys.executable, "-m", "kiln.distill", teacher, str(tmp_path / "p.onnx"),
                        "-o", str(tmp_path / "d.onnx"), "--data", str(tmp_path / "train.npz"),
                        "--eval", str(tmp_path / "held.npz"), "--epochs", "12", "--lr", "1e-2",
                        "--batch-size", "64", "--temperature", "2", "--threads", "1",
                        "--seed", "3"], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    scores = [float(line.split("top-1 agreement ")[1].split()[0])
              for line in r.stdout.splitlines() if line.startswith("distill eval")]
    assert len(scores) == 2 and scores[1] >= scores[0] + 0.15, r.stdout
    assert "wrote " in r.stdout and os.path.exists(tmp_path / "d.onnx")
    student = kiln.InferenceSession(str(tmp_path / "d.onnx"))
    assert student.get_inputs()[0].shape[0] == "batch"
