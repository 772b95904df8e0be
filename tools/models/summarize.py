#!/usr/bin/env python3
"""Prints the results of check_case.py (a directory of CASE.json) as a Markdown table.

    python3 tools/models/summarize.py build/models/results
"""
import glob
import json
import os
import sys


def fmt_bytes(n):
    return f"{n / 1024:,.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):,.1f} MiB"


def row(r):
    d, e = r.get("direct") or {}, r.get("engine") or {}
    nodes = f"{r.get('nodes_before', '?')} -> {r.get('nodes_after', '?')}"
    if "arena_bytes" in r:
        ratio = r["naive_bytes"] / r["arena_bytes"] if r["arena_bytes"] else 1.0
        memory = f"{fmt_bytes(r['arena_bytes'])} / {fmt_bytes(r['naive_bytes'])} ({ratio:.1f}x)"
        if r.get("unplanned_values"):
            memory += f", {r['unplanned_values']} unbounded"
    else:
        memory = "?"

    def err(x, ran=True):
        if not ran:
            return "-"  # not run (--engine-only)
        if not x:
            return "failed"
        # null: the output was not finite (inf / nan)
        return f"{x['max_rel_l2']:.1e}" if x.get("max_rel_l2") is not None else "non-finite"

    def ms(x):
        # Set 0: median wall time (process CPU time).
        if not x or not x.get("set_ms"):
            return "-"
        cpu = x.get("set_cpu_ms")
        return f"{x['set_ms'][0]:,.1f}" + (f" ({cpu[0]:,.1f})" if cpu else "")

    direct_ran = r.get("direct") is not None or "precision" not in r
    ort = "-"
    if r.get("ort_ms") is not None:
        ort = f"{r['ort_ms']:,.1f}" + (f" ({r['ort_cpu_ms']:,.1f})" if "ort_cpu_ms" in r else "")
    sets = (d or e).get("sets", "-")
    return (f"| {r['case']} | {nodes} | {memory} | {err(d, direct_ran)} | {err(e)} | {ms(d)} | "
            f"{ms(e)} | {ort} | {sets} | {'ok' if r.get('ok') else 'FAIL'} |")


HEADER = ("| case | nodes before -> after | activations planned / naive | rel L2 direct | "
          "rel L2 engine | direct ms (cpu) | engine ms (cpu) | onnxruntime ms (cpu) | sets | |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def table(results_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path) as f:
            rows.append(row(json.load(f)))
    return HEADER + "\n" + "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(table(sys.argv[1]))
