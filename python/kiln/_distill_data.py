"""The input sets kiln.distill trains and scores on: files, directories, dicts, iterables, cut or
joined into batches. Numpy only (no torch), so the data forms are those of kiln.quantize's
calibration sets plus iterables."""
import os

import numpy as np

from .compiler import _fail, _input_set


def _read_pb_set(directory):
    """NAME.pb TensorProto files -> {name: array} (kiln quantize's --calibration-inputs)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:
        raise ImportError("reading .pb input sets needs the 'onnx' package: pip install onnx "
                          "(or give the sets as .npz files)") from e
    out = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".pb"):
            t = onnx.TensorProto()
            with open(os.path.join(directory, f), "rb") as fh:
                t.ParseFromString(fh.read())
            out[t.name or f[:-3]] = numpy_helper.to_array(t)
    return out


class _Source:
    """Input sets, epoch after epoch: each epoch() yields {name: array} sets."""

    def __init__(self, data, shuffle, rng):
        self.shuffle, self.rng, self.one_shot, self.used = shuffle, rng, False, False
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            if os.path.isdir(path):
                files = sorted(os.listdir(path))
                npz = [os.path.join(path, f) for f in files if f.endswith(".npz")]
                subdirs = [os.path.join(path, f) for f in files
                           if os.path.isdir(os.path.join(path, f))]
                if npz:
                    self.items = npz
                elif any(f.endswith(".pb") for f in files):
                    self.items = [_read_pb_set(path)]
                elif subdirs:
                    self.items = [_read_pb_set(d) for d in subdirs]
                else:
                    _fail(f"data: directory '{path}' has no .npz files, .pb files or "
                          "subdirectories of .pb files")
            else:
                self.items = [path]
            self.kind = "list"
        elif isinstance(data, dict):
            self.items, self.kind = [data], "list"
        elif isinstance(data, (list, tuple)):
            if not data:
                _fail("data: the list of input sets is empty")
            self.items, self.kind = list(data), "list"
        elif callable(data):
            self.items, self.kind = data, "callable"
        elif hasattr(data, "__iter__"):
            self.items, self.kind = data, "iterable"
            self.one_shot = iter(data) is data
        else:
            raise TypeError("data is an .npz file, a directory of input sets, a dict, a list of "
                            "dicts or .npz paths, an iterable of dicts or a callable returning "
                            f"one; got {type(data).__name__}")

    def epoch(self):
        if self.kind == "list":
            order = list(range(len(self.items)))
            if self.shuffle:
                self.rng.shuffle(order)
            for i in order:
                yield self._load(self.items[i], f"data set {i}")
            return
        items = self.items() if self.kind == "callable" else self.items
        if self.one_shot and self.used:
            return
        self.used = True
        for i, item in enumerate(items):
            yield self._load(item, f"data item {i}")

    def _load(self, item, what):
        return _arrays(item, what)


def _arrays(item, what):
    """An input set (a dict or an .npz path) as {name: numpy array}."""
    out = {}
    for name, prepared in _input_set(item, what):
        if prepared[0] != "t":
            _fail(f"{what}: input '{name}' is a string tensor; a student takes numbers")
        out[name] = prepared[1]
    return out


def _samples(batch):
    sizes = {v.shape[0] if v.ndim else None for v in batch.values()}
    if len(sizes) != 1 or None in sizes:
        _fail(f"data: to make batches every array of an input set needs the same leading (batch) "
              f"axis; got shapes {[list(v.shape) for v in batch.values()]} (batch_size=None "
              "takes the sets as they are)")
    return sizes.pop()


def _batches(source, batch_size, shuffle, rng):
    """The sets of one epoch cut or joined into batches of batch_size samples (None: as they
    come). Holds at most one batch's samples."""
    pending, count = [], 0
    for s in source.epoch():
        if batch_size is None:
            yield s
            continue
        n = _samples(s)
        if shuffle and n > 1:
            order = rng.permutation(n)
            s = {k: v[order] for k, v in s.items()}
        start = 0
        while start < n:
            take = min(batch_size - count, n - start)
            pending.append({k: v[start:start + take] for k, v in s.items()})
            count += take
            start += take
            if count == batch_size:
                yield _join(pending)
                pending, count = [], 0
    if pending:
        yield _join(pending)


def _join(parts):
    if len(parts) == 1:
        return parts[0]
    keys = parts[0].keys()
    for p in parts[1:]:
        if p.keys() != keys:
            _fail(f"data: input sets name different inputs ({sorted(keys)} and {sorted(p.keys())})")
    return {k: np.concatenate([p[k] for p in parts]) for k in keys}
