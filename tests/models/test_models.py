"""Real models through Kiln at small sizes: each case runs directly from ONNX (as imported) and as
a compiled engine (default passes), and every output must be within 1e-4 relative L2 error of
onnxruntime's. The figures of each case go to BUILD/models/results/CASE.json, from which
tools/models/summarize.py writes the table in bench/results."""
import json
import os

import pytest

from suite import case_names
from check_case import MAX_REL_L2, check_case


@pytest.mark.parametrize("case", case_names())
def test_model_matches_onnxruntime(case, cases_dir, tools, results_dir, build_dir):
    result = check_case(os.path.join(cases_dir, case), tools["kiln"], tools["check"],
                        os.path.join(build_dir, "models", "work"))
    with open(os.path.join(results_dir, case + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    assert result["ok"], result["log"]
    for path in ("direct", "engine"):
        assert result[path]["max_rel_l2"] <= MAX_REL_L2
    # The compiled graph may only shrink, and its plan never needs more than the naive sum.
    assert result["nodes_after"] <= result["nodes_before"]
    assert result["arena_bytes"] <= result["naive_bytes"]
    if result["shape_range"] or case.startswith("light_") or case.split("_op")[0] in (
            "resnet50", "mobilenet_v2", "efficientnet_b0"):
        # Declared ranges (or static shapes) bound every activation: all of them are planned.
        assert result["unplanned_values"] == 0, "values left out of the memory plan"
