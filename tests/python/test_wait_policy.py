"""The package's OpenMP runtime: LLVM's libomp runs the kernels (oneDNN's included) by default, the
package sets no wait variables, and the user's choice is what the runtime then uses."""
import os
import subprocess
import sys

VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

# Runs a 2-thread session first, so that oneDNN and Kiln's loops have run on the runtime.
CODE = """
import os, numpy as np, onnx, kiln
from onnx import TensorProto, helper
w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.ones(64 * 64, np.float32))
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]),
                       helper.make_node("Relu", ["y"], ["z"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64])],
                      [helper.make_tensor_value_info("z", TensorProto.FLOAT, [256, 64])], [w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
so = kiln.SessionOptions()
so.intra_op_num_threads = 2
s = kiln.InferenceSession(m.SerializeToString(), so)
x = np.ones((256, 64), np.float32)
for _ in range(5):
    (z,) = s.run(None, {"x": x})
assert np.all(z == 64), z
print("|".join(os.environ.get(v, "-") for v in %r))
print(kiln._kiln.openmp_runtime())
print(kiln._kiln.openmp_wait_policy())
""" % (VARS,)


def run(env_extra):
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", CODE], env=env, check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()
    return out[-3:]


def test_default_is_libomp_and_sets_nothing():
    variables, runtime, policy = run({})
    assert variables == "-|-|-"
    # libdnnl.so.2 names libgomp.so.1; the module links libomp, which the loader binds first.
    assert runtime.startswith("libomp"), runtime
    assert policy.startswith(runtime + ": idle threads spin, yielding"), policy
    assert policy.endswith("(default)"), policy


def test_the_users_choice_stays():
    variables, runtime, policy = run({"KMP_BLOCKTIME": "0"})
    assert variables == "-|-|0"
    assert " 0 ms, then sleep (KMP_BLOCKTIME=0)" in policy, policy
    variables, runtime, policy = run({"OMP_WAIT_POLICY": "PASSIVE"})
    assert variables == "PASSIVE|-|-"
    assert " 0 ms, then sleep (OMP_WAIT_POLICY=PASSIVE)" in policy, policy
