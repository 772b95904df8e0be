"""The markdown of bench/quantize/fashion_mnist.py's results (its JSON), with issue 12's acceptance
lines checked:

    python3 bench/quantize/fashion_mnist_report.py OUT.json > OUT.md
"""
import json
import sys

# Issue 12: INT8 drop <= 0.3 points; 50 % channels + distillation within 0.5 points of fp32 with
# >= 1.6x lower latency.
MAX_INT8_DROP, MAX_DISTILLED_DROP, MIN_SPEEDUP = 0.3, 0.5, 1.6
DISTILLED = "pruned 50 % + distilled"


def markdown(r):
    acc, drops, lat = r["accuracy"], r["drops_points"], r["latency_ms"]
    weights = r["training"] if isinstance(r["training"], str) else "trained by this run"
    out = ["# Fashion-MNIST: INT8, 50 % channel pruning and distillation (issue 12)", "",
           "```", r["command"], "```", "",
           f"Machine: {r['machine']}. Weights: {weights}.",
           "", "## Accuracy on the 10,000 test images (Kiln)", "",
           "| model | top-1 | drop from fp32 (points) |", "|---|---|---|"]
    for name, value in acc.items():
        drop = round(100 * (acc["fp32"] - value), 2)
        out.append(f"| {name} | {100 * value:.2f} % | {'' if name == 'fp32' else f'{drop:+.2f}'} |")
    if "int8_kiln_vs_onnxruntime_top1_agreement" in r:
        out += ["", f"Kiln's and onnxruntime's runs of the INT8 file agree on the top-1 class of "
                f"{100 * r['int8_kiln_vs_onnxruntime_top1_agreement']:.2f} % of the test images "
                f"(onnxruntime {r['onnxruntime']})."]
    threads = sorted(lat, key=int)
    batches = sorted(lat[threads[0]], key=int)
    out += ["", "## Latency in Kiln (median ms; speedup: median of per-round ratios to fp32)", "",
            "| threads | batch | fp32 | INT8 | speedup | pruned + distilled | speedup |",
            "|---|---|---|---|---|---|---|"]
    for t in threads:
        for b in batches:
            row = lat[t][b]
            out.append(f"| {t} | {b} | {row['fp32']:.3f} | {row['int8']:.3f} | "
                       f"{row['int8 speedup']:.2f}x | {row[DISTILLED]:.3f} | "
                       f"{row[DISTILLED + ' speedup']:.2f}x |")
    speedups = [lat[t][b][DISTILLED + " speedup"] for t in threads for b in batches]
    out += ["", "## Acceptance (issue 12)", "",
            f"- INT8 accuracy drop <= {MAX_INT8_DROP} points: {drops['int8']:+.2f} -> "
            f"**{'met' if drops['int8'] <= MAX_INT8_DROP else 'missed'}**",
            f"- 50 % channels + distillation within {MAX_DISTILLED_DROP} points of fp32: "
            f"{drops[DISTILLED]:+.2f} -> "
            f"**{'met' if drops[DISTILLED] <= MAX_DISTILLED_DROP else 'missed'}**",
            f"- >= {MIN_SPEEDUP}x lower latency (1 and 2 threads): "
            f"{', '.join(f'{s:.2f}x' for s in speedups)} (threads x batch as in the table) -> "
            f"**{'met' if min(speedups) >= MIN_SPEEDUP else 'missed where below'}**",
            "", "## Reports", "", "`kiln quantize`:", "", "```", *r["quantize"]["report"], "```",
            "", "`kiln prune`:", "", "```", *r["prune"]["report"], "```", "",
            "`kiln.distill`: " + ", ".join(f"{k} {v}" for k, v in r["distill"].items()
                                           if k != "progress"), ""]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(markdown(json.load(f)))
