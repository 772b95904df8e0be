"""kiln prune: magnitude and 2:4 masks, and structured channel pruning that writes a smaller dense
model. The pruned model must open in onnxruntime, compute what the original computes with the
removed channels' readers zeroed, report sizes and FLOPs, leave residual-joined layers alone with
the reason, and be refused (not written) when it misses the gate."""
import re

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from prune_models import residual_cnn


def gate_sets(tmp_path, count=4, seed=1):
    flags = []
    rng = np.random.default_rng(seed)
    for i in range(count):
        p = tmp_path / f"set{i}.npz"
        np.savez(p, image=rng.standard_normal((4, 3, 16, 16)).astype(np.float32))
        flags += ["--calibration-npz", p]
    return flags


def weights(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_prune_channels_writes_a_smaller_model_equal_to_the_zeroed_original(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "cnn.pruned.onnx"
    r = kiln("prune", model, "-o", out, "--method", "channels", "--ratio", "0.5",
             "--no-bias-compensation", "--no-residual-groups", "--min-cosine", "0",
             *gate_sets(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prune:   conv1 (Conv): channels 8 -> 4" in r.stdout
    # conv2 and conv3 meet at the residual Add; fc's features are the graph output.
    assert re.search(r"left alone: conv2: .*Add 'residual'.*residual", r.stdout)
    assert re.search(r"left alone: conv3: .*residual", r.stdout)
    assert "left alone: fc: its channels reach the graph output 'logits'" in r.stdout
    assert "left alone: dw: a grouped or depthwise Conv" in r.stdout
    assert re.search(r"prune: parameters [\d.]+ K -> [\d.]+ K .*FLOPs [\d.]+ M -> [\d.]+ M",
                     r.stdout)
    assert re.search(r"prune: file [\d.]+ MiB -> [\d.]+ MiB", r.stdout)

    pruned = onnx.load(str(out))
    onnx.checker.check_model(pruned)
    w, w0 = weights(out), weights(model)
    assert w["w1"].shape == (4, 3, 3, 3) and w["b1"].shape == (4,)
    assert all(w[k].shape == (4,) for k in ("g", "beta", "mean", "var", "bd"))
    assert w["wd"].shape == (4, 1, 3, 3) and w["w2"].shape == (16, 4, 1, 1)
    dw = next(n for n in pruned.graph.node if n.name == "dw")
    assert helper.get_attribute_value(next(a for a in dw.attribute if a.name == "group")) == 4
    # Kept channels are the four largest filters by L1 norm, in their order.
    l1 = np.abs(w0["w1"]).sum(axis=(1, 2, 3))
    keep = sorted(np.argsort(-l1, kind="stable")[:4])
    assert np.array_equal(w["w1"], w0["w1"][keep])

    # The original with conv2's input channels that were removed set to zero computes the same.
    zeroed = onnx.load(str(model))
    for init in zeroed.graph.initializer:
        if init.name == "w2":
            a = numpy_helper.to_array(init).copy()
            a[:, [c for c in range(8) if c not in keep]] = 0
            init.CopyFrom(numpy_helper.from_array(a, "w2"))
    x = np.random.default_rng(9).standard_normal((8, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(zeroed.SerializeToString()).run(None, {"image": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"image": x})[0]
    assert np.abs(got - want).max() <= 1e-4 * (np.abs(want).max() + 1)
    # And Kiln runs it: its bench reads the smaller model.
    assert kiln("bench", out, "--iterations", "2", "--warmup", "1").returncode == 0


def test_prune_channels_joins_residual_branches_with_the_same_channels(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "joined.onnx"
    r = kiln("prune", model, "-o", out, "--ratio", "0.5", "--no-bias-compensation",
             "--min-cosine", "0", *gate_sets(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("prune:   conv2 (Conv): channels 16 -> 8, weights 128 -> 32 (with conv3: joined by "
            "residual Adds)") in r.stdout, r.stdout
    w, w0 = weights(out), weights(model)
    assert w["w2"].shape == (8, 4, 1, 1) and w["w3"].shape == (8, 8, 3, 3)
    assert w["wf"].shape == (10, 8)
    # One set of channels on both branches: conv2's and conv3's output channels kept alike, by
    # their filters' L1 norms added up.
    l1 = np.abs(w0["w2"]).sum(axis=(1, 2, 3)) + np.abs(w0["w3"]).sum(axis=(1, 2, 3))
    keep = sorted(np.argsort(-l1, kind="stable")[:8])
    assert np.array_equal(w["wf"], w0["wf"][:, keep])
    # Equal to the original with the removed channels' readers (conv3's inputs, fc's features)
    # zeroed, conv1's removed channels as well (conv2's inputs).
    keep1 = sorted(np.argsort(-np.abs(w0["w1"]).sum(axis=(1, 2, 3)), kind="stable")[:4])
    zeroed = onnx.load(str(model))
    drop = [c for c in range(16) if c not in keep]
    for init in zeroed.graph.initializer:
        a = numpy_helper.to_array(init).copy()
        if init.name == "w3":
            a[:, drop] = 0
        elif init.name == "wf":
            a[:, drop] = 0
        elif init.name == "w2":
            a[:, [c for c in range(8) if c not in keep1]] = 0
        else:
            continue
        init.CopyFrom(numpy_helper.from_array(a, init.name))
    x = np.random.default_rng(9).standard_normal((8, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(zeroed.SerializeToString()).run(None, {"image": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"image": x})[0]
    assert np.abs(got - want).max() <= 1e-4 * (np.abs(want).max() + 1)


def test_prune_bias_compensation_and_contribution_keep_closer_to_the_float_model(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    x = np.random.default_rng(9).standard_normal((32, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(model)).run(None, {"image": x})[0]

    def cosine_of(*flags):
        out = tmp_path / f"c{len(flags)}.onnx"
        r = kiln("prune", model, "-o", out, "--ratio", "0.5", "--min-cosine", "0",
                 "--no-residual-groups", *flags,
                 *gate_sets(tmp_path, count=8))
        assert r.returncode == 0, r.stdout + r.stderr
        got = ort.InferenceSession(str(out)).run(None, {"image": x})[0]
        return float((got * want).sum() / np.sqrt((got * got).sum() * (want * want).sum()))

    plain = cosine_of("--no-bias-compensation")
    compensated = cosine_of()
    contribution = cosine_of("--criterion", "contribution")
    assert compensated > plain and contribution >= compensated - 1e-3, (plain, compensated,
                                                                         contribution)


def test_prune_gate_refuses_and_names_the_layer(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "refused.onnx"
    r = kiln("prune", model, "-o", out, "--ratio", "0.75", "--min-cosine", "0.99999",
             "--no-bias-compensation", *gate_sets(tmp_path))
    assert r.returncode == 1
    assert "not written" in r.stderr
    assert re.search(r"prune gate: pruned layers whose outputs .*drift most: conv\d", r.stdout)
    assert not out.exists()
    # --allow-drift writes it, with a warning.
    r = kiln("prune", model, "-o", out, "--ratio", "0.75", "--min-cosine", "0.99999",
             "--allow-drift", *gate_sets(tmp_path))
    assert r.returncode == 0 and out.exists() and "warning: prune gate" in r.stderr


def test_prune_two_of_four_masks_two_of_every_four_input_channels(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "sparse.onnx"
    r = kiln("prune", model, "-o", out, "--method", "2:4", "--allow-drift", *gate_sets(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    # conv1 reads 3 channels and the depthwise Conv 1: neither is a multiple of 4.
    assert "left alone: conv1: its reduction axis has 3 entries, not a multiple of 4" in r.stdout
    assert "left alone: dw: its reduction axis has 1 entries" in r.stdout
    w, w0 = weights(out), weights(model)
    for name, axis in (("w2", 1), ("w3", 1), ("wf", 1)):
        a = np.moveaxis(w[name], axis, -1)
        groups = a.reshape(*a.shape[:-1], -1, 4)
        assert ((groups != 0).sum(-1) == 2).all(), name
        kept = np.moveaxis(np.abs(np.moveaxis(w0[name], axis, -1)).reshape(groups.shape), -1, 0)
        kept_mask = np.moveaxis(groups != 0, -1, 0)
        # The two kept are the two largest of each four.
        smallest_kept = np.where(kept_mask, kept, np.inf).min(0)
        largest_dropped = np.where(kept_mask, -np.inf, kept).max(0)
        assert (smallest_kept >= largest_dropped).all()
    assert np.array_equal(w["w1"], w0["w1"])
    assert w["w2"].shape == w0["w2"].shape
    assert re.search(r"sparsity 0\.0% -> 4\d\.\d%", r.stdout)


def test_prune_magnitude_global_and_per_layer(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    for flags in ([], ["--global"]):
        out = tmp_path / f"mag{len(flags)}.onnx"
        r = kiln("prune", model, "-o", out, "--method", "magnitude", "--ratio", "0.5",
                 "--allow-drift", *flags, *gate_sets(tmp_path))
        assert r.returncode == 0, r.stdout + r.stderr
        conv_weights = [v for k, v in weights(out).items() if k in ("w1", "wd", "w2", "w3", "wf")]
        zeros = sum(int((v == 0).sum()) for v in conv_weights)
        total = sum(v.size for v in conv_weights)
        assert abs(zeros / total - 0.5) < 0.01
        if not flags:
            assert all(abs((v == 0).mean() - 0.5) < 0.05 for v in conv_weights)


def test_prune_search_finds_ratios_that_pass(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "searched.onnx"
    r = kiln("prune", model, "-o", out, "--method", "magnitude", "--ratio", "0.8", "--search",
             "--min-cosine", "0.995", *gate_sets(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prune search: conv1 alone passes up to ratio" in r.stdout
    m = re.search(r"output 'logits': cosine ([\d.]+)", r.stdout)
    assert m and float(m.group(1)) >= 0.995


def test_prune_bad_input_gets_a_clear_error(kiln, tmp_path):
    model = residual_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "x.onnx"
    r = kiln("prune", model, "-o", out, "--ratio", "1")
    assert r.returncode == 1 and "ratio 1 must be in [0, 1)" in r.stderr
    r = kiln("prune", model, "-o", out, "--layer-ratio", "conv9=0.5")
    assert r.returncode == 1 and "'conv9', not a prunable layer; did you mean 'conv1'" in r.stderr
    r = kiln("prune", model, "-o", out, "--layer-ratio", "conv2=0.5", "--no-residual-groups")
    assert r.returncode == 1 and "'conv2', which cannot be pruned" in r.stderr
    r = kiln("prune", model, "-o", out, "--layer-ratio", "conv1")
    assert r.returncode == 2 and "NAME=RATIO" in r.stderr
    r = kiln("prune", model, "-o", out, "--criterion", "bn-gamma", "--ratio", "0.5",
             "--allow-drift")
    assert r.returncode == 0, r.stderr  # conv1 has bn1 after it
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    r = kiln("prune", bad, "-o", out)
    assert r.returncode == 1 and "bad.onnx" in r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr
