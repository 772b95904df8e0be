"""Ensemble configs for tests/server/test_ensemble.py and the differential tests
(test_triton_diff_ensemble.py): pipelines over the models of triton_models.py (add_sub,
identity_bytes, add_version), written once as dicts and given to the servers as config.pbtxt
(an ensemble has no backend line, so Kiln and Triton read the same file) or as the JSON of the
load API. Also the broken configs both servers must refuse, with Kiln's message for each."""
import json
import os

FP32, BYTES = "TYPE_FP32", "TYPE_STRING"
TWO_IN = (("IN0", FP32, [4]), ("IN1", FP32, [4]))
TWO_OUT = (("OUT0", FP32, [4]), ("OUT1", FP32, [4]))
ADD_SUB_IN = {"INPUT0": "IN0", "INPUT1": "IN1"}


def ensemble(name, steps, inputs=TWO_IN, outputs=TWO_OUT, max_batch=8, **extra):
    """An ensemble config: `steps` as (model, version, {model input: tensor},
    {model output: tensor}); inputs and outputs as (name, config type, dims)."""
    config = {
        "name": name, "platform": "ensemble", "max_batch_size": max_batch,
        "input": [{"name": n, "data_type": t, "dims": list(d)} for n, t, d in inputs],
        "output": [{"name": n, "data_type": t, "dims": list(d)} for n, t, d in outputs],
        "ensemble_scheduling": {"step": [
            {"model_name": m, "model_version": v, "input_map": dict(i), "output_map": dict(o)}
            for m, v, i, o in steps]},
    }
    config.update(extra)
    return config


def pbtxt(message, sep="\n"):
    """The protobuf text format of a config dict (the fields these tests use)."""
    parts = []
    for key, value in message.items():
        if key in ("input_map", "output_map"):
            parts += [f'{key} {{ key: "{k}" value: "{v}" }}' for k, v in value.items()]
        elif isinstance(value, dict):
            parts.append(f"{key} {{ {pbtxt(value, ' ')} }}")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            parts.append(f"{key} [ " + ", ".join(f"{{ {pbtxt(v, ' ')} }}" for v in value) + " ]")
        elif isinstance(value, list):
            if value:
                parts.append(f"{key}: [ {', '.join(json.dumps(v) for v in value)} ]")
        elif isinstance(value, str) and value.startswith(("TYPE_", "KIND_")):
            parts.append(f"{key}: {value}")
        else:
            parts.append(f"{key}: {json.dumps(value)}")
    return sep.join(parts)


def write(repo, config, versions=(1,)):
    """The ensemble's folder: config.pbtxt and empty version folders (Triton's layout)."""
    folder = os.path.join(repo, config["name"])
    for v in versions:
        os.makedirs(os.path.join(folder, str(v)), exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(pbtxt(config) + "\n")


def load_body(config):
    """The load API's body with `config` as its override."""
    return json.dumps({"parameters": {"config": json.dumps(config)}})


# The working ensembles over triton_models.MODELS.
CHAIN = ensemble("ens_chain", [
    ("add_sub", -1, ADD_SUB_IN, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
    ("add_sub", -1, {"INPUT0": "sum", "INPUT1": "diff"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})])
# A -> (s, d); then B and C both read s and d, so they run side by side.
DAG = ensemble("ens_dag", [
    ("add_sub", -1, ADD_SUB_IN, {"OUTPUT0": "s", "OUTPUT1": "d"}),
    ("add_sub", -1, {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "OUT0"}),
    ("add_sub", -1, {"INPUT0": "d", "INPUT1": "s"}, {"OUTPUT1": "OUT1"})])
BYTES_CHAIN = ensemble("ens_bytes", [
    ("identity_bytes", -1, ADD_SUB_IN, {"OUTPUT0": "a", "OUTPUT1": "b"}),
    ("identity_bytes", -1, {"INPUT0": "b", "INPUT1": "a"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})],
    inputs=(("IN0", BYTES, [4]), ("IN1", BYTES, [4])),
    outputs=(("OUT0", BYTES, [4]), ("OUT1", BYTES, [4])))
ONE_IN, ONE_OUT = (("IN0", FP32, [4]),), (("OUT0", FP32, [4]),)


def versioned(name, version, max_batch=0):
    return ensemble(name, [("add_version", version, {"INPUT0": "IN0"}, {"OUTPUT0": "OUT0"})],
                    inputs=ONE_IN, outputs=ONE_OUT, max_batch=max_batch)


V1, V2, VLATEST = versioned("ens_v1", 1), versioned("ens_v2", 2), versioned("ens_vlatest", -1)
# A batching ensemble over a model that does not batch: batch 1 in, the batch dim dropped for the
# step and put back on the way out (Triton's reshape between the two).
MIXED = versioned("ens_mixed", 1, max_batch=1)
# IN0 takes any length, add_sub only 4: a request of 3 passes the ensemble and fails in the step.
LOOSE = ensemble("ens_loose", [("add_sub", -1, ADD_SUB_IN, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})],
                 inputs=(("IN0", FP32, [-1]), ("IN1", FP32, [4])))
OUTER = ensemble("ens_outer", [("ens_chain", -1, {"IN0": "IN0", "IN1": "IN1"},
                                {"OUT0": "OUT0", "OUT1": "OUT1"})])
WORKING = [CHAIN, DAG, BYTES_CHAIN, V1, V2, VLATEST, MIXED, LOOSE, OUTER]


def _one_step(output_map=None, input_map=None, **kw):
    return ensemble(kw.pop("name", "ens_bad"), [
        ("add_sub", kw.pop("version", -1), input_map or ADD_SUB_IN,
         output_map or {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})], **kw)


def bad_configs(name="ens_bad"):
    """case -> (config, Kiln's message). Triton 2.51's words, Kiln's detail in parentheses after
    them where it adds one (the cycle)."""
    out01 = {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"}
    return {
        "unknown model input": (_one_step(name=name, input_map={"INPUT0": "IN0", "INPUTX": "IN1"}),
                                f"in ensemble {name}, ensemble tensor IN1 is mapping to "
                                "non-existing input INPUTX in model add_sub"),
        "unknown model output": (_one_step(name=name, output_map={"OUTPUT0": "OUT0",
                                                                  "OUTPUTX": "OUT1"}),
                                 f"in ensemble {name}, ensemble tensor OUT1 is mapped from "
                                 "non-existing output OUTPUTX in model add_sub"),
        "tensor nothing writes": (_one_step(name=name, input_map={"INPUT0": "IN0",
                                                                  "INPUT1": "ghost"},
                                            inputs=TWO_IN[:1]),
                                  f"output 'OUT0' for ensemble '{name}' is not written: at least "
                                  "one of its depending tensors, 'ghost', is not connected"),
        "cycle": (ensemble(name, [
            ("add_sub", -1, {"INPUT0": "IN0", "INPUT1": "x"}, {"OUTPUT0": "y", "OUTPUT1": "OUT1"}),
            ("add_sub", -1, {"INPUT0": "y", "INPUT1": "IN1"}, {"OUTPUT0": "x", "OUTPUT1": "OUT0"})]),
            f"output 'OUT0' for ensemble '{name}' is not written: at least one of its depending "
            "tensors, 'x', is not connected (the steps form a cycle, each waiting for a tensor "
            "the one before it writes: step 0 -> step 1 -> step 0)"),
        "tensor written twice": (ensemble(name, [("add_sub", -1, ADD_SUB_IN, out01),
                                                 ("add_sub", -1, ADD_SUB_IN, {"OUTPUT0": "OUT0"})]),
                                 f"ensemble tensor 'OUT0' can appear in an output map only once "
                                 f"for ensemble '{name}' step 1"),
        "input unused": (_one_step(name=name, inputs=TWO_IN + (("IN2", FP32, [4]),)),
                         f"ensemble input 'IN2' for ensemble {name}' is not used"),
        "output not written": (_one_step(name=name, output_map={"OUTPUT0": "OUT0"}),
                               f"ensemble output 'OUT1' for ensemble {name}' is not used"),
        "tensor unused": (ensemble(name, [("add_sub", -1, ADD_SUB_IN, out01),
                                          ("add_sub", -1, ADD_SUB_IN, {"OUTPUT0": "dangling"})]),
                          f"ensemble tensor 'dangling' is unused in ensemble '{name}'"),
        "batch above a step's": (_one_step(name=name, max_batch=16),
                                 f"ensemble {name} allows maximum batch size 16, but it contains "
                                 "model add_sub which only allows maximum batch size to be 8"),
        "datatype disagrees": (_one_step(name=name, inputs=(("IN0", "TYPE_INT32", [4]),
                                                            ("IN1", "TYPE_INT32", [4])),
                                         outputs=(("OUT0", "TYPE_INT32", [4]),
                                                  ("OUT1", "TYPE_INT32", [4]))),
                               f"in ensemble {name}, ensemble tensor IN0: inconsistent data type: "
                               f"TYPE_INT32 is inferred from model {name} while TYPE_FP32 is "
                               "inferred from model add_sub"),
        "shape disagrees": (_one_step(name=name, inputs=(("IN0", FP32, [5]), ("IN1", FP32, [4]))),
                            f"in ensemble {name}, ensemble tensor IN0: inconsistent shape: [-1,5] "
                            f"is inferred from model {name} while [-1,4] is inferred from model "
                            "add_sub"),
        "model input not fed": (_one_step(name=name, input_map={"INPUT0": "IN0"},
                                          inputs=TWO_IN[:1]),
                                f"in ensemble {name}, input INPUT1 in model add_sub is not mapped "
                                "to any ensemble tensors"),
        "instance group": (_one_step(name=name, instance_group=[{"count": 1, "kind": "KIND_CPU"}]),
                           f"instance group should not be specified for ensemble '{name}'"),
        "no model name": (ensemble(name, [("", -1, ADD_SUB_IN, out01)]),
                          f"must specify 'model_name' in step 0 of ensemble '{name}'"),
        "no input map": (ensemble(name, [("add_sub", -1, {}, out01)]),
                         f"must specify 'input_map' in step 0 of ensemble '{name}'"),
        "no steps": (ensemble(name, []), f"must specify 'step' for ensemble '{name}'"),
        "missing model": (ensemble(name, [("nope", -1, ADD_SUB_IN, out01)]),
                          f"ensemble {name} contains models that are not available or ambiguous: "
                          "nope"),
        "missing version": (_one_step(name=name, version=7),
                            f"ensemble '{name}' depends on 'add_sub' whose required version 7 is "
                            "not loaded."),
        "itself as a step": (ensemble(name, [(name, -1, ADD_SUB_IN, out01)]),
                             f"circular dependency between ensembles: {name} -> ... -> {name} -> "
                             f"{name}"),
    }
