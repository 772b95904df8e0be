"""``kiln.distill``: fine-tune a PyTorch student against a teacher that Kiln runs.

    import kiln.distill as kd
    student = kd.student_from_onnx("model.pruned.onnx")   # or any torch.nn.Module
    report = kd.distill(student, "model.onnx", "train.npz", epochs=3, lr=1e-4, batch_size=16,
                        temperature=4.0, time_limit=600)
    print(report.summary())
    kd.export_onnx(student, "model.distilled.onnx", {"image": x})  # then kiln compile / quantize

The teacher (an ONNX file or a .kiln engine, through kiln.InferenceSession) runs on each batch as
it comes, one batch ahead on a second thread; nothing it computes is kept beyond that batch. The
loss is Hinton's soft-target loss, KL(softmax(t / T) || softmax(s / T)) * T^2, mixed with the
cross-entropy on hard labels when the data carries them (alpha * soft + (1 - alpha) * hard); or,
for outputs that are not class scores, an MSE or cosine loss on the outputs themselves.
docs/DISTILLATION.md has the recipe and what it recovers on a pruned EfficientNet-Lite0.

PyTorch is needed by this module only: ``import kiln`` never imports it.
"""
import argparse
import concurrent.futures
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field

try:
    import torch
    import torch.nn.functional as F
except ImportError as _e:  # the one dependency of this module that kiln itself lacks
    raise ImportError(
        "kiln.distill needs PyTorch, which this interpreter "
        f"({sys.executable}) cannot import ({_e}): install the 'torch' package (pip install "
        "torch; on Debian, apt-get install python3-torch for /usr/bin/python3)") from _e

import numpy as np

from . import _kiln
from ._distill_data import _arrays, _batches, _samples, _Source
from .compiler import _fail
from .session import InferenceSession, SessionOptions

__all__ = ["distill", "evaluate", "export_onnx", "student_from_onnx", "DistillReport",
           "EpochSummary", "Agreement", "ExportResult"]

_LOSSES = ("kl", "mse", "cosine")


def student_from_onnx(model):
    """An ONNX model (a path or an onnx.ModelProto) as a trainable torch.nn.Module, e.g. the output
    of `kiln prune`. Float weights of Conv / Gemm / MatMul / BatchNormalization / Gather and the
    per-channel constants of element-wise ops are its parameters; constant chains (an exporter's
    pad and shape arithmetic) are folded. forward() takes the graph inputs in order (also by
    name) and returns the output, or a tuple of them. Needs the 'onnx' package. Raises
    kiln.Unsupported naming the nodes of ops it cannot train."""
    from ._onnx_student import OnnxStudent

    return OnnxStudent(model)


@dataclass(frozen=True)
class EpochSummary:
    epoch: int  # 0-based
    steps: int
    samples: int
    loss: float  # mean training loss over its steps
    agreement: float  # mean top-1 agreement with the teacher on its batches (kl), else nan
    seconds: float


@dataclass(frozen=True)
class DistillReport:
    steps: int
    samples: int
    epochs: list  # [EpochSummary], the last one possibly partial
    stopped: str  # "epochs" (all ran), "max_steps" or "time_limit"
    seconds: float
    teacher_seconds: float  # inside the teacher's runs (on the prefetch thread: overlapped)
    wait_seconds: float  # the training loop waiting for the teacher or the data
    loss: str
    output_name: str
    temperature: float
    alpha: float
    lr: float
    schedule: str  # "constant", "cosine over 400 steps", "cosine over 400 steps or 600 s"
    losses: list = field(repr=False)  # per step
    agreements: list = field(repr=False)  # per step, top-1 agreement on the batch (kl)

    def _window(self, values, last):
        if not values:
            return float("nan")
        n = max(1, len(values) // 10)
        part = values[-n:] if last else values[:n]
        return float(np.mean(part))

    @property
    def loss_start(self):
        """The mean loss over the first tenth of the steps."""
        return self._window(self.losses, False)

    @property
    def loss_end(self):
        """The mean loss over the last tenth of the steps."""
        return self._window(self.losses, True)

    @property
    def agreement_start(self):
        return self._window(self.agreements, False)

    @property
    def agreement_end(self):
        return self._window(self.agreements, True)

    def summary(self):
        lines = [f"distill: {self.steps} steps, {self.samples} samples in {self.seconds:.1f} s "
                 f"(stopped: {self.stopped}); loss {self.loss} on '{self.output_name}'"
                 + (f", T {self.temperature:g}, alpha {self.alpha:g}" if self.loss == "kl" else "")
                 + f"; lr {self.lr:g}, {self.schedule}"]
        lines.append(f"distill: loss {self.loss_start:.4f} -> {self.loss_end:.4f} (first / last "
                     "tenth of the steps)" + (
                         f", batch top-1 agreement {self.agreement_start:.3f} -> "
                         f"{self.agreement_end:.3f}" if self.agreements else ""))
        for e in self.epochs:
            lines.append(f"distill:   epoch {e.epoch}: {e.steps} steps, loss {e.loss:.4f}"
                         + (f", agreement {e.agreement:.3f}" if not math.isnan(e.agreement)
                            else "") + f", {e.seconds:.1f} s")
        lines.append(f"distill: teacher {self.teacher_seconds:.1f} s (overlapped), waited "
                     f"{self.wait_seconds:.1f} s for teacher or data")
        return "\n".join(lines)


@dataclass(frozen=True)
class Agreement:
    samples: int
    top1: float  # argmax over class_axis equal (per position of the other axes)
    top1_confident: float  # the same where the teacher's softmax top probability >= confidence
    confident: int
    cosine: float  # mean per-sample cosine of the flattened outputs
    rel_l2: float  # ||student - teacher|| / ||teacher|| over everything


@dataclass(frozen=True)
class ExportResult:
    path: str
    rel_l2: float  # Kiln's run of the written file against the torch student on the example
    input_names: list
    output_names: list


# ---------------------------------------------------------------------------------------------
# teacher and student


def _is_onnx_student(student):
    return hasattr(student, "input_names") and hasattr(student, "output_names") and hasattr(
        student, "_nodes")


class _Teacher:
    def __init__(self, teacher, threads):
        if isinstance(teacher, (str, os.PathLike)):
            options = SessionOptions()
            if threads:
                options.intra_op_num_threads = threads
            teacher = InferenceSession(os.fspath(teacher), options)
        if not (hasattr(teacher, "run") and hasattr(teacher, "get_inputs")):
            raise TypeError("teacher is a path to an ONNX file or .kiln engine, or a "
                            f"kiln.InferenceSession; got {type(teacher).__name__}")
        self.session = teacher
        self.inputs = [a.name for a in teacher.get_inputs()]
        self.outputs = [a.name for a in teacher.get_outputs()]
        dims = [a.shape[0] if a.shape else None for a in teacher.get_inputs()]
        fixed = {d for d in dims if isinstance(d, int) and d > 0}
        self.fixed_batch = fixed.pop() if len(fixed) == 1 else None
        self.seconds = 0.0

    def run(self, output_name, feeds):
        feeds = {k: v for k, v in feeds.items() if k in self.inputs}
        n = _samples(feeds) if self.fixed_batch else None
        t0 = time.perf_counter()
        try:
            if self.fixed_batch and n != self.fixed_batch:
                # A model exported at a fixed batch (often 1) runs the batch in pieces of it.
                k = self.fixed_batch
                if n % k:
                    _fail(f"the teacher takes batches of exactly {k}; batch_size {n} is not a "
                          "multiple of it")
                parts = [self.session.run([output_name], {a: v[i:i + k] for a, v in feeds.items()})
                         [0] for i in range(0, n, k)]
                return np.concatenate(parts)
            return self.session.run([output_name], feeds)[0]
        finally:
            self.seconds += time.perf_counter() - t0


def _student_call(student, student_forward, inputs):
    if student_forward is not None:
        return student_forward(student, inputs)
    if _is_onnx_student(student):
        return student(*[inputs[n] for n in student.input_names])
    if len(inputs) == 1:
        return student(next(iter(inputs.values())))
    return student(**inputs)


def _select(out, output_name, teacher_outputs):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        if output_name not in out:
            _fail(f"the student returned a dict without '{output_name}' (its keys: "
                  f"{sorted(out)})")
        return out[output_name]
    if isinstance(out, (list, tuple)):
        i = teacher_outputs.index(output_name)
        if i >= len(out):
            _fail(f"the student returned {len(out)} outputs; '{output_name}' is the teacher's "
                  f"output {i}")
        return out[i]
    raise TypeError(f"the student returned {type(out).__name__}, not a tensor, tuple or dict")


def _to_torch(batch, device):
    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in batch.items()}


def _class_last(x, axis):
    """[..., C] with every other axis flattened into rows."""
    x = x.movedim(axis, -1)
    return x.reshape(-1, x.shape[-1])


def _loss(kind, s, t, labels, temperature, alpha, class_axis):
    if kind == "kl":
        s2, t2 = _class_last(s, class_axis), _class_last(t, class_axis)
        soft = F.kl_div(F.log_softmax(s2 / temperature, -1), F.log_softmax(t2 / temperature, -1),
                        reduction="batchmean", log_target=True) * temperature * temperature
        if labels is None:
            return soft
        hard = F.cross_entropy(s2, labels.reshape(-1).long())
        return alpha * soft + (1 - alpha) * hard
    s2, t2 = s.reshape(s.shape[0], -1), t.reshape(t.shape[0], -1)
    if kind == "mse":
        return F.mse_loss(s2, t2)
    return (1 - F.cosine_similarity(s2, t2, dim=1)).mean()


def _check_number(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value >= low and (high is None or value <= high)):
        _fail(f"{name} must be a number in [{low}, {'inf' if high is None else high}], "
              f"got {value!r}")


def _check_count(name, value, allow_none=True, low=1):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(f"{name} must be an int >= {low}{' or None' if allow_none else ''}, got {value!r}")


class _Threads:
    """torch's intra-op threads for the call, restored after."""

    def __init__(self, threads):
        self.threads, self.saved = threads, None

    def __enter__(self):
        if self.threads:
            self.saved = torch.get_num_threads()
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        if self.saved:
            torch.set_num_threads(self.saved)


# ---------------------------------------------------------------------------------------------
# distill


def distill(student, teacher, data, *, epochs=1, lr=1e-4, temperature=4.0, alpha=0.9,
            labels=None, output_name=None, loss="kl", class_axis=-1, batch_size=32,
            shuffle=True, max_steps=None, time_limit=None, optimizer="adam", weight_decay=0.0,
            schedule="cosine", max_grad_norm=None, freeze_batchnorm=False, device="cpu",
            threads=None, seed=0, student_forward=None, log=None):
    """Trains `student` (a torch.nn.Module, in place) to match `teacher` on `data`; returns a
    DistillReport.

    teacher: an ONNX file or .kiln engine (run by kiln.InferenceSession), or an InferenceSession.
        A teacher whose inputs have a fixed batch (an export at batch 1) runs each batch in pieces.
    data: input sets, each {input name: array with a leading batch axis}: an .npz file, a
        directory (of .npz files, or of NAME.pb files / subdirectories of them as `kiln quantize
        --calibration-inputs` reads), a dict, a list of dicts or .npz paths, an iterable of dicts
        (a generator is read once: one epoch), or a callable returning a fresh
        iterable each epoch. batch_size cuts or joins the sets into batches of that many samples
        (None: the sets as they come); shuffle permutes the sets (and samples within them) each
        epoch, seeded.
    output_name: the teacher output to match (default its first). The student returns a tensor,
        a tuple in the teacher's output order, or a dict by output name.
    loss: "kl" (class scores along class_axis: the soft-target loss at `temperature`, times
        T^2; with labels, alpha * soft + (1 - alpha) * cross-entropy), "mse" or "cosine" (any
        output: features, embeddings, boxes).
    labels: the name of an entry of each input set holding class indices (shape: the output's
        without class_axis); it is not fed to teacher or student.
    max_steps, time_limit (seconds): stop early (checked after each step).
    optimizer: "adam", "adamw", "sgd" (momentum 0.9) or callable(parameters) -> optimizer;
        schedule: "cosine" (decays to 0 over the run's budget: the steps when their number is
        known, from max_steps or from epochs of in-memory sets, and / or time_limit, whichever
        runs out first) or "constant".
    freeze_batchnorm: BatchNorm layers keep their running statistics (eval mode) while the rest
        trains: safer with small batches.
    threads: torch's intra-op threads during the call, and the threads of a teacher opened here.
    student_forward: callable(student, {name: tensor}) -> output, for students whose forward
        does not take the inputs positionally / by name (the default: one input alone,
        student_from_onnx students in their input order, else by keyword).
    log: callable(step, loss, agreement) after each step.
    """
    if not isinstance(student, torch.nn.Module):
        raise TypeError(f"student is a torch.nn.Module, got {type(student).__name__}")
    if loss not in _LOSSES:
        _fail(f"loss is one of {', '.join(_LOSSES)}, got {loss!r}")
    _check_number("temperature", temperature, 1e-6)
    _check_number("alpha", alpha, 0, 1)
    _check_number("lr", lr, 0)
    _check_number("weight_decay", weight_decay, 0)
    _check_count("epochs", epochs, allow_none=False)
    _check_count("batch_size", batch_size)
    _check_count("max_steps", max_steps)
    _check_count("seed", seed, allow_none=False, low=0)
    _check_count("threads", threads, low=0)
    if time_limit is not None:
        _check_number("time_limit", time_limit, 0)
    if max_grad_norm is not None:
        _check_number("max_grad_norm", max_grad_norm, 0)
    if schedule not in ("cosine", "constant"):
        _fail(f"schedule is 'cosine' or 'constant', got {schedule!r}")
    if labels is not None and not isinstance(labels, str):
        _fail(f"labels is the name of an entry of the input sets, got {labels!r}")
    if labels is not None and loss != "kl":
        _fail(f"labels go with loss='kl' (cross-entropy on class scores), not {loss!r}")
    if log is not None and not callable(log):
        raise TypeError(f"log is a callable(step, loss, agreement), got {type(log).__name__}")

    start = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    random.seed(seed)
    teach = _Teacher(teacher, threads)
    if output_name is None:
        output_name = teach.outputs[0]
    elif output_name not in teach.outputs:
        _fail(f"output_name '{output_name}' is not an output of the teacher "
              f"({', '.join(teach.outputs)})")
    source = _Source(data, shuffle, rng)
    if source.one_shot and epochs > 1:
        _fail("data is a one-shot iterator (a generator): it can feed only one epoch; pass a "
              "list, a file or directory, or a callable returning a fresh iterable")

    student.to(device)
    params = [p for p in student.parameters() if p.requires_grad]
    if not params:
        _fail("the student has no parameters that require grad")
    if callable(optimizer):
        opt = optimizer(params)
    elif optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    else:
        _fail(f"optimizer is 'adam', 'adamw', 'sgd' or a callable(parameters), got {optimizer!r}")
    total = max_steps
    if total is None and source.kind == "list" and batch_size is not None and all(
            isinstance(i, dict) for i in source.items):
        per_epoch = sum(math.ceil(_samples(i) / batch_size) for i in source.items)
        total = per_epoch * epochs  # sets joined across items can only make this smaller
    # The cosine decays over the run's budget: the steps when their number is known, the time
    # limit when one is set; with both, over whichever runs out first.
    bases = [g["lr"] for g in opt.param_groups]
    cosine = schedule == "cosine" and (total is not None or time_limit is not None)
    plan = "constant"
    if cosine:
        plan = " or ".join(([f"{total} steps"] if total else [])
                           + ([f"{time_limit:g} s"] if time_limit is not None else []))
        plan = f"cosine over {plan}"

    def set_lr():
        done = 0.0
        if total:
            done = steps / total
        if time_limit is not None:
            done = max(done, (time.perf_counter() - start) / time_limit if time_limit else 1.0)
        factor = 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))
        for g, base in zip(opt.param_groups, bases):
            g["lr"] = base * factor

    was_training = student.training
    losses, agreements, summaries = [], [], []
    steps = samples = 0
    stopped = "epochs"
    wait = 0.0
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-teacher")

    def fetch(it):
        """The next batch and the teacher's output for it (on the prefetch thread)."""
        batch = next(it, None)
        if batch is None:
            return None
        label = None
        if labels is not None:
            if labels not in batch:
                _fail(f"labels: input set lacks '{labels}' (it has {sorted(batch)})")
            label = batch[labels]
            batch = {k: v for k, v in batch.items() if k != labels}
        unknown = sorted(set(batch) - set(teach.inputs))
        if unknown:
            _fail(f"data: {unknown} are not inputs of the teacher ({', '.join(teach.inputs)})")
        return batch, label, teach.run(output_name, batch)

    try:
        with _Threads(threads):
            student.train()
            if freeze_batchnorm:
                for m in student.modules():
                    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                        m.eval()
            for epoch in range(epochs):
                t_epoch, first = time.perf_counter(), len(losses)
                epoch_samples = 0
                it = iter(_batches(source, batch_size, shuffle, rng))
                pending = pool.submit(fetch, it)
                while True:
                    t_wait = time.perf_counter()
                    got = pending.result()  # raises what the prefetch raised
                    wait += time.perf_counter() - t_wait
                    if got is None:
                        break
                    pending = None
                    # The next batch goes to the teacher while this one trains, unless this is
                    # the last step.
                    last = max_steps is not None and steps + 1 >= max_steps
                    if not last:
                        pending = pool.submit(fetch, it)
                    batch, label, target = got
                    x = _to_torch(batch, device)
                    t = torch.from_numpy(np.ascontiguousarray(target)).to(device).float()
                    s = _select(_student_call(student, student_forward, x), output_name,
                                teach.outputs)
                    if s.shape != t.shape:
                        _fail(f"the student's output has shape {list(s.shape)}, the teacher's "
                              f"'{output_name}' {list(t.shape)}")
                    y = None if label is None else torch.from_numpy(np.asarray(label)).to(device)
                    value = _loss(loss, s.float(), t, y, temperature, alpha, class_axis)
                    opt.zero_grad(set_to_none=True)
                    value.backward()
                    if max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                    if cosine:
                        set_lr()
                    opt.step()
                    steps += 1
                    n = s.shape[0]
                    samples += n
                    epoch_samples += n
                    losses.append(float(value.detach()))
                    agree = float("nan")
                    if loss == "kl":
                        with torch.no_grad():
                            agree = float((s.argmax(class_axis) == t.argmax(class_axis))
                                          .float().mean())
                        agreements.append(agree)
                    if log is not None:
                        log(steps, losses[-1], agree)
                    if max_steps is not None and steps >= max_steps:
                        stopped = "max_steps"
                    elif time_limit is not None and time.perf_counter() - start >= time_limit:
                        stopped = "time_limit"
                    if stopped != "epochs":
                        break
                done = losses[first:]
                summaries.append(EpochSummary(
                    epoch, len(done), epoch_samples, float(np.mean(done)) if done else float("nan"),
                    float(np.mean(agreements[first:])) if loss == "kl" and done else float("nan"),
                    time.perf_counter() - t_epoch))
                if pending is not None:
                    pending.cancel()
                    concurrent.futures.wait([pending])  # at most one teacher run
                if stopped != "epochs":
                    break
    finally:
        pool.shutdown(wait=True)
        student.train(was_training)
    return DistillReport(steps=steps, samples=samples, epochs=summaries, stopped=stopped,
                         seconds=time.perf_counter() - start, teacher_seconds=teach.seconds,
                         wait_seconds=wait, loss=loss, output_name=output_name,
                         temperature=float(temperature), alpha=float(alpha), lr=float(lr),
                         schedule=plan, losses=losses, agreements=agreements)


def evaluate(student, teacher, data, *, output_name=None, class_axis=-1, confidence=0.5,
             batch_size=32, device="cpu", threads=None, student_forward=None):
    """How well `student` agrees with `teacher` on `data` (the arguments as distill's, no
    shuffling): Agreement with top-1 agreement (all, and where the teacher's top softmax
    probability is >= confidence), the mean per-sample cosine and the relative L2 error."""
    teach = _Teacher(teacher, threads)
    output_name = output_name or teach.outputs[0]
    if output_name not in teach.outputs:
        _fail(f"output_name '{output_name}' is not an output of the teacher "
              f"({', '.join(teach.outputs)})")
    source = _Source(data, False, np.random.default_rng(0))
    agree = confident_agree = confident = positions = samples = 0
    cosines, err2, ref2 = [], 0.0, 0.0
    was_training = student.training
    student.to(device).eval()
    try:
        with _Threads(threads), torch.no_grad():
            for batch in _batches(source, batch_size, False, None):
                t = torch.from_numpy(teach.run(output_name, batch)).float()
                feeds = {k: v for k, v in batch.items() if k in teach.inputs}
                s = _select(_student_call(student, student_forward, _to_torch(feeds, device)),
                            output_name, teach.outputs).float().cpu()
                if s.shape != t.shape:
                    _fail(f"the student's output has shape {list(s.shape)}, the teacher's "
                          f"'{output_name}' {list(t.shape)}")
                same = s.argmax(class_axis) == t.argmax(class_axis)
                sure = F.softmax(t, class_axis).amax(class_axis) >= confidence
                agree += int(same.sum())
                positions += same.numel()
                confident_agree += int((same & sure).sum())
                confident += int(sure.sum())
                samples += s.shape[0]
                cosines += F.cosine_similarity(s.reshape(s.shape[0], -1),
                                               t.reshape(t.shape[0], -1), dim=1).tolist()
                err2 += float((s - t).double().square().sum())
                ref2 += float(t.double().square().sum())
    finally:
        student.train(was_training)
    return Agreement(samples=samples, top1=agree / positions if positions else float("nan"),
                     top1_confident=confident_agree / confident if confident else float("nan"),
                     confident=confident, cosine=float(np.mean(cosines)) if cosines else float(
                         "nan"), rel_l2=math.sqrt(err2 / ref2) if ref2 else float("nan"))


# ---------------------------------------------------------------------------------------------
# export


class _Positional(torch.nn.Module):
    def __init__(self, student, names, student_forward):
        super().__init__()
        self.student, self.names, self.student_forward = student, names, student_forward

    def forward(self, *xs):
        return _student_call(self.student, self.student_forward, dict(zip(self.names, xs)))


def export_onnx(student, path, example, *, input_names=None, output_names=None,
                dynamic_batch=True, opset=13, student_forward=None, fold=True, check=True,
                max_rel_l2=1e-4, threads=None):
    """Writes `student` as an ONNX file (torch.onnx.export, traced on `example`, an input set
    {name: array}) that `kiln compile`, `kiln prune` and `kiln quantize` take; returns an
    ExportResult. Names default to a student_from_onnx student's (its source model's) or the
    example's keys and "output" / "output_1" ... fold: the constant chains the exporter leaves
    (F.pad's pads) become initializers (needs the 'onnx' package). With check, Kiln runs the
    written file on the example: a relative L2 error against the torch student above max_rel_l2
    removes the file and raises kiln.InvalidArgument."""
    if not isinstance(student, torch.nn.Module):
        raise TypeError(f"student is a torch.nn.Module, got {type(student).__name__}")
    batch = _arrays(example, "example")
    if input_names is None:
        input_names = (list(student.input_names) if _is_onnx_student(student)
                       else list(batch))
    missing = [n for n in input_names if n not in batch]
    if missing:
        _fail(f"example lacks inputs {missing}")
    was_training = student.training
    student.eval()
    wrapper = _Positional(student, input_names, student_forward)
    xs = tuple(torch.from_numpy(np.ascontiguousarray(batch[n])) for n in input_names)
    try:
        with _Threads(threads), torch.no_grad():
            out = wrapper(*xs)
            outs = [out] if isinstance(out, torch.Tensor) else (
                list(out.values()) if isinstance(out, dict) else list(out))
            if output_names is None:
                output_names = (list(student.output_names) if _is_onnx_student(student) else
                                ["output"] + [f"output_{i}" for i in range(1, len(outs))])
            axes = None
            if dynamic_batch:
                axes = {n: {0: "batch"} for n in list(input_names) + list(output_names)}
            with warnings.catch_warnings():
                # The tracer's notes on Python ints taken from static dims, and the exporter's on
                # the pad chains it cannot fold (fold_constants does): expected, not actionable.
                warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
                warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
                torch.onnx.export(wrapper, xs, os.fspath(path), input_names=list(input_names),
                                  output_names=list(output_names), dynamic_axes=axes,
                                  opset_version=opset, do_constant_folding=True)
    finally:
        student.train(was_training)
    if fold:
        from ._onnx_student import fold_constants

        fold_constants(path)
    rel = float("nan")
    if check:
        options = SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        got = InferenceSession(os.fspath(path), options).run(
            list(output_names), {n: batch[n] for n in input_names})
        err2 = sum(float(np.square(g.astype(np.float64) - w.numpy()).sum())
                   for g, w in zip(got, outs))
        ref2 = sum(float(np.square(w.numpy().astype(np.float64)).sum()) for w in outs)
        rel = math.sqrt(err2 / ref2) if ref2 else math.sqrt(err2)
        if not rel <= max_rel_l2:
            os.remove(os.fspath(path))
            raise _kiln.InvalidArgument(
                f"export_onnx: Kiln's run of the exported model differs from the torch student "
                f"by relative L2 {rel:.3g} (> {max_rel_l2:g}) on the example; nothing written")
    return ExportResult(path=os.fspath(path), rel_l2=rel, input_names=list(input_names),
                        output_names=list(output_names))


# ---------------------------------------------------------------------------------------------
# python3 -m kiln.distill


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m kiln.distill",
        description="Fine-tune an ONNX student (e.g. `kiln prune`'s output) against a teacher "
                    "that Kiln runs, and write the student back as ONNX.")
    ap.add_argument("teacher", help="the teacher: an ONNX file or a .kiln engine")
    ap.add_argument("student", help="the student: an ONNX file (trained from its weights)")
    ap.add_argument("-o", "--output", required=True, help="the distilled student (.onnx)")
    ap.add_argument("--data", required=True,
                    help="training input sets: an .npz file or a directory of them")
    ap.add_argument("--eval", help="held-out input sets (an .npz file or a directory) to score "
                    "the agreement on, before and after")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--time-limit", type=float)
    ap.add_argument("--temperature", type=float, default=4.0)
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--labels")
    ap.add_argument("--output-name")
    ap.add_argument("--loss", choices=_LOSSES, default="kl")
    ap.add_argument("--class-axis", type=int, default=-1)
    ap.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dynamic-batch", action="store_true",
                    help="export at the example's batch instead of a symbolic one")
    a = ap.parse_args(argv)
    data = a.data
    student = student_from_onnx(a.student)
    scores = []
    if a.eval:
        scores.append(evaluate(student, a.teacher, a.eval, output_name=a.output_name,
                               class_axis=a.class_axis, threads=a.threads,
                               batch_size=a.batch_size))
    r = distill(student, a.teacher, data, epochs=a.epochs, lr=a.lr,
                temperature=a.temperature, alpha=a.alpha, labels=a.labels,
                output_name=a.output_name, loss=a.loss, class_axis=a.class_axis,
                batch_size=a.batch_size, max_steps=a.max_steps, time_limit=a.time_limit,
                optimizer=a.optimizer, threads=a.threads, seed=a.seed)
    print(r.summary())
    if a.eval:
        scores.append(evaluate(student, a.teacher, a.eval, output_name=r.output_name,
                               class_axis=a.class_axis, threads=a.threads,
                               batch_size=a.batch_size))
        for name, s in zip(("before", "after"), scores):
            print(f"distill eval {name}: top-1 agreement {s.top1:.3f} ({s.samples} samples; "
                  f"{s.top1_confident:.3f} on {s.confident} confident), cosine {s.cosine:.4f}")
    example = next(_batches(_Source(data, False, None), 1, False, None))
    example = {k: v for k, v in example.items() if k in student.input_names}
    e = export_onnx(student, a.output, example, dynamic_batch=not a.no_dynamic_batch,
                    threads=a.threads)
    print(f"wrote {e.path} (Kiln's run of it against the student: relative L2 {e.rel_l2:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
