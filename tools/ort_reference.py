"""Runs an ONNX model on onnxruntime, the second reference of `kiln verify`.

    ort_reference.py --version
    ort_reference.py MODEL IN_DIR OUT_DIR [--all-values] [--threads N]

Reads every *.pb TensorProto in IN_DIR (the input's name is the one inside the proto), runs the
model and writes each output to OUT_DIR/output_<i>.pb with its name inside (a sequence:
output_<i>.seq.pb, a SequenceProto). --all-values also
returns every node output of the main graph, so that kiln can find the first node whose value
drifts. onnxruntime runs with basic graph optimizations only, so its values are those of the
original graph's nodes. Exits 3 when onnxruntime cannot be imported, 4 with the error's message
when onnxruntime fails.

kiln embeds this file at build time (src/CMakeLists.txt); tests and scripts may run it directly.
"""
import glob
import os
import sys


def main(argv):
    try:
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnxruntime is not installed ({e}); pip install onnxruntime", file=sys.stderr)
        return 3
    if argv[1:] == ["--version"]:
        print(ort.__version__)
        return 0
    import numpy as np
    import onnx
    from onnx import numpy_helper

    args = argv[1:]
    all_values = "--all-values" in args
    threads = 0
    if "--threads" in args:
        threads = int(args[args.index("--threads") + 1])
        del args[args.index("--threads"):args.index("--threads") + 2]
    args = [a for a in args if a != "--all-values"]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model_path, in_dir, out_dir = args

    feeds = {}
    for path in sorted(glob.glob(os.path.join(in_dir, "*.pb"))):
        proto = onnx.TensorProto()
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
        feeds[proto.name] = numpy_helper.to_array(proto)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if threads:
        options.intra_op_num_threads = threads
    if all_values:
        model = onnx.load(model_path)
        have = {o.name for o in model.graph.output}
        for node in model.graph.node:
            for name in node.output:
                if name and name not in have:
                    model.graph.output.append(onnx.ValueInfoProto(name=name))
                    have.add(name)
        # onnx.load pulled any external weights in, so the bytes stand alone.
        source = model.SerializeToString()
    else:
        source = model_path
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, feeds)
    for i, (name, value) in enumerate(zip(names, results)):
        path = os.path.join(out_dir, f"output_{i}.pb")
        if isinstance(value, list):
            path = os.path.join(out_dir, f"output_{i}.seq.pb")
            seq = onnx.SequenceProto(name=name, elem_type=onnx.SequenceProto.TENSOR)
            seq.tensor_values.extend(numpy_helper.from_array(np.asarray(t)) for t in value)
            data = seq.SerializeToString()
        elif isinstance(value, np.ndarray) or np.isscalar(value):
            data = numpy_helper.from_array(np.asarray(value), name).SerializeToString()
        else:
            continue  # maps (ZipMap) have no TensorProto form
        with open(path, "wb") as f:
            f.write(data)
    return 0


def run(argv):
    try:
        return main(argv)
    except Exception as e:  # noqa: BLE001 - the message is what kiln shows; a traceback is noise
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(run(sys.argv))
