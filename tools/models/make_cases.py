#!/usr/bin/env python3
"""Turns exported models into test cases with onnxruntime's outputs as the reference.

    python3 tools/models/make_cases.py --models DIR --out CASES [--only STEM,...] [--light]

For every DIR/STEM.json written by export_models.py: CASES/STEM/model.onnx and
CASES/STEM/test_data_set_N/{input_K,output_K}.pb, the layout of the ONNX backend tests, with
inputs drawn from a generator seeded per model and set. --light adds the "light" CNNs the onnx
wheel ships (onnx/backend/test/data/light), fed as the ONNX backend runner feeds them
(arange(n)/n); their shipped output_0.pb is checked against onnxruntime here.

Runs on the pyenv python (onnx, onnxruntime, numpy); torch is not needed.
"""
import argparse
import glob
import json
import os
import shutil
import sys
import zlib

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort

ONNX_TO_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def relative_l2(actual, expected):
    a = np.asarray(actual, np.float64).ravel()
    e = np.asarray(expected, np.float64).ravel()
    norm = np.linalg.norm(e)
    return float(np.linalg.norm(a - e) / (norm if norm > 0 else 1.0))


def draw(spec, dtype, rng):
    shape = tuple(spec["shape"])
    dist = spec["dist"]
    if dist == "normal":
        x = rng.standard_normal(shape) + spec.get("offset", 0.0)
    elif dist == "int":
        x = rng.integers(spec["low"], spec["high"], size=shape)
    elif dist == "padding_mask":
        # Row r attends to its first len_r tokens (at least one); the rest is padding.
        batch, seq = shape
        x = np.zeros(shape)
        for r in range(batch):
            x[r, : max(1, seq - (r * 5) % seq)] = 1
    elif dist == "const":
        x = np.full(shape, spec["value"])
    else:
        raise ValueError(f"unknown input distribution '{dist}'")
    return np.asarray(x).astype(dtype)


def graph_feeds(model):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def new_session(path_or_bytes):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(path_or_bytes, opts, providers=["CPUExecutionProvider"])


def check_informative(case_dir, name, value):
    # A constant or non-finite reference (a zero-initialized head, a saturated softmax) would let
    # any wrong result through the comparison.
    value = np.asarray(value)
    if value.dtype.kind == "f" and value.size > 1:
        spread = float(np.ptp(value)) if np.all(np.isfinite(value)) else 0.0
        if spread <= 1e-6 * float(np.max(np.abs(value))):
            sys.exit(f"make_cases: {case_dir}: reference output '{name}' is constant or not finite")


def write_set(case_dir, index, inputs, outputs):
    set_dir = os.path.join(case_dir, f"test_data_set_{index}")
    os.makedirs(set_dir, exist_ok=True)
    for k, (name, value) in enumerate(inputs):
        with open(os.path.join(set_dir, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, name).SerializeToString())
    for k, (name, value) in enumerate(outputs):
        check_informative(case_dir, name, value)
        with open(os.path.join(set_dir, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(value), name).SerializeToString())


def fresh_case_dir(out, stem, model_path):
    case_dir = os.path.join(out, stem)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    target = os.path.join(case_dir, "model.onnx")
    try:
        os.link(model_path, target)
    except OSError:
        shutil.copyfile(model_path, target)
    return case_dir


def make_exported_case(meta_path, out):
    with open(meta_path) as f:
        meta = json.load(f)
    model_path = os.path.join(os.path.dirname(meta_path), meta["model"])
    model = onnx.load(model_path)
    onnx.checker.check_model(model)
    feeds = graph_feeds(model)
    case_dir = fresh_case_dir(out, meta["name"], model_path)
    session = new_session(model_path)
    out_names = [o.name for o in session.get_outputs()]
    for index, set_spec in enumerate(meta["sets"]):
        # The seed depends on the model and the set only, so cases are the same on every run.
        rng = np.random.default_rng(zlib.crc32(f"{meta['name']}/{index}".encode()))
        inputs = []
        for v in feeds:
            dtype = ONNX_TO_NUMPY[v.type.tensor_type.elem_type]
            inputs.append((v.name, draw(set_spec[v.name], dtype, rng)))
        outputs = session.run(out_names, dict(inputs))
        write_set(case_dir, index, inputs, list(zip(out_names, outputs)))
    info = {k: meta[k] for k in ("opset", "small", "shape_range")}
    info["source"] = "export_models.py"
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(info, f, indent=1)
    return case_dir


def light_dir():
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def check_shipped_output(model_path):
    """onnxruntime on the model as shipped must reproduce its shipped output_0.pb."""
    shipped = f"{os.path.splitext(model_path)[0]}_output_0.pb"
    if not os.path.exists(shipped):
        return
    model = onnx.load(model_path)
    feeds = {name: value for name, value in light_inputs(model)}
    output = new_session(model_path).run(None, feeds)[0]
    err = relative_l2(output, numpy_helper.to_array(onnx.load_tensor(shipped)))
    if err > 1e-4:
        sys.exit(f"make_cases: onnxruntime disagrees with {shipped}: relative L2 {err:.3g}")


def light_inputs(model):
    # As onnx.backend.test.runner feeds them: unknown dims 1, values arange(n) / n.
    inputs = []
    for v in graph_feeds(model):
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in v.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        inputs.append((v.name, (np.arange(n).reshape(shape) / n).astype(np.float32)))
    return inputs


def light_weight(shape, consumer, consumers, rng):
    """Random values for a weight of `shape` by its role (first consumer op and input index),
    scaled so activations neither vanish nor explode through a deep random network."""
    op, index, node = consumer
    shape = tuple(int(d) for d in shape)
    if op == "Conv" and index == 1:
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
    if op == "Gemm" and index == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        return rng.standard_normal(shape) * np.sqrt(1.0 / shape[1 if trans_b else 0])
    if op == "BatchNormalization" and index in (1, 4):  # scale, variance
        return rng.uniform(0.5, 1.5, shape)
    if op == "Unsqueeze":  # DenseNet's affine after BN: Unsqueeze -> Mul (scale) or Add (bias)
        next_ops = [c[0] for c in consumers.get(node.output[0], [])]
        if "Mul" in next_ops:
            return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape) * 0.1  # biases, BN mean and bias


def randomize_light_weights(model, seed):
    """The light models hold every weight as ConstantOfShape(0.02), which makes every output
    of the network the same value (softmax 0.001 everywhere) and a comparison of outputs blind.
    Replace each such node by an initializer of seeded random values of its role and shape."""
    rng = np.random.default_rng(seed)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consumers = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node.op_type, k, node))
    kept = []
    graph_inputs = {v.name for v in model.graph.input}
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits and \
                consumers.get(node.output[0]):
            shape = inits[node.input[0]]
            value = light_weight(shape, consumers[node.output[0]][0], consumers, rng)
            model.graph.initializer.append(
                numpy_helper.from_array(value.astype(np.float32), node.output[0]))
            if model.ir_version < 4 and node.output[0] not in graph_inputs:
                # Before IR 4 every initializer must also be a graph input.
                model.graph.input.append(onnx.helper.make_tensor_value_info(
                    node.output[0], onnx.TensorProto.FLOAT, list(value.shape)))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    # The shape initializers the replaced nodes read are now unused: drop them.
    used = {name for node in kept for name in node.input} | {o.name for o in model.graph.output}
    unused = {i.name for i in model.graph.initializer if i.name not in used}
    live_inits = [i for i in model.graph.initializer if i.name not in unused]
    live_inputs = [v for v in model.graph.input if v.name not in unused]
    del model.graph.initializer[:]
    model.graph.initializer.extend(live_inits)
    del model.graph.input[:]
    model.graph.input.extend(live_inputs)
    onnx.checker.check_model(model)
    return model


def temper_softmax(model, feeds, target_std=2.0):
    """Random weights without trained BatchNorm statistics grow activations through residual
    blocks until the final Softmax is one-hot, which hides any error short of a changed argmax.
    Scale the weights and bias of the layer feeding each Softmax so its logits have std
    `target_std` (logits are linear in them). Returns the model, changed in place."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}

    def root_initializer(name):
        # Through ops that only move values (light models reshape their FC weights).
        while name not in inits and name in producers and \
                producers[name].op_type in ("Reshape", "Transpose", "Flatten", "Squeeze",
                                            "Unsqueeze"):
            name = producers[name].input[0]
        return name if name in inits else None

    probes = {}
    for node in model.graph.node:
        src = producers.get(node.input[0]) if node.op_type == "Softmax" else None
        if src is None or src.op_type not in ("Gemm", "Conv"):
            continue
        roots = [root_initializer(name) for name in src.input[1:]]
        if all(roots):
            probes[src.output[0]] = roots
    if not probes:
        return model
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in probes)
    session = new_session(probe.SerializeToString())
    logits = session.run(list(probes), feeds)
    for roots, value in zip(probes.values(), logits):
        scale = target_std / max(float(np.std(value)), 1e-12)
        for weight in roots:
            t = inits[weight]
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(scale),
                                               weight))
    return model


def make_light_case(model_path, out):
    check_shipped_output(model_path)
    stem = os.path.splitext(os.path.basename(model_path))[0]
    model = randomize_light_weights(onnx.load(model_path), zlib.crc32(stem.encode()))
    model = temper_softmax(model, dict(light_inputs(model)))
    case_dir = os.path.join(out, stem)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    model_path = os.path.join(case_dir, "model.onnx")
    onnx.save(model, model_path)
    inputs = light_inputs(model)
    session = new_session(model_path)
    out_names = [o.name for o in session.get_outputs()]
    outputs = session.run(out_names, dict(inputs))
    write_set(case_dir, 0, inputs, list(zip(out_names, outputs)))
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump({"opset": opset, "small": False, "shape_range": "",
                   "source": "onnx light, weights randomized"},
                  f, indent=1)
    return case_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="directory of export_models.py's output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated stems (resnet50_op17, ...)")
    ap.add_argument("--light", action="store_true", help="also the onnx wheel's light models")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    os.makedirs(args.out, exist_ok=True)
    if args.models:
        for meta in sorted(glob.glob(os.path.join(args.models, "*.json"))):
            if only and os.path.splitext(os.path.basename(meta))[0] not in only:
                continue
            print(make_exported_case(meta, args.out), flush=True)
    if args.light:
        for path in sorted(glob.glob(os.path.join(light_dir(), "*.onnx"))):
            if only and os.path.splitext(os.path.basename(path))[0] not in only:
                continue
            print(make_light_case(path, args.out), flush=True)


if __name__ == "__main__":
    main()
