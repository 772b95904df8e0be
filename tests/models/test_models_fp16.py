"""Real models compiled with `kiln compile --fp16` at CI sizes: every output of every data set
within the --fp16 gate's default limit (1e-2 relative L2) of onnxruntime in float32, and the
engine at most 0.6x the float32 engine's size. Figures go to BUILD/models/results/CASE_fp16.json
(bench/results/2026-11-30-fp16.md has the measured table)."""
import json
import os

import pytest

from check_fp16 import FP16_MAX_REL_L2, check_fp16_case

# The CNNs with most weights and the transformer encoders; the others share their ops.
FP16_CASES = ["resnet50_op17", "mobilenet_v2_op17", "efficientnet_b0_op17", "bert_op17", "bert_op13",
              "vit_b_16_op17"]


@pytest.mark.parametrize("case", FP16_CASES)
def test_fp16_engine_matches_onnxruntime(case, cases_dir, tools, results_dir, build_dir):
    result = check_fp16_case(os.path.join(cases_dir, case), tools["kiln"], tools["check"],
                             os.path.join(build_dir, "models", "work"))
    with open(os.path.join(results_dir, case + "_fp16.json"), "w") as f:
        json.dump(result, f, indent=1)
    assert result["ok"], result["log"]
    assert result["max_rel_l2"] <= FP16_MAX_REL_L2
    assert result["size_ratio"] <= 0.6, result["size_ratio"]
