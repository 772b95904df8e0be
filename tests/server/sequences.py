"""Stateful models for the sequence batcher tests, built with onnx.helper.

`accumulator` is Triton's classic sequence example with an implicit state: OUTPUT = the previous
OUTPUT of the same sequence (the state ACC_IN, fed back from ACC_OUT) + INPUT, starting again from
the initial state on START. FLAGS reports the control inputs the server filled for the row
(START + 2 * END + 4 * READY) and CORRID_OUT the correlation ID, so a test sees every control."""
import os

import numpy as np
import onnx.helper as oh
import onnx.numpy_helper as onh
from onnx import TensorProto as T

from models import _save, _write

CORRID_TYPES = {"UINT64": T.UINT64, "INT64": T.INT64, "UINT32": T.UINT32, "INT32": T.INT32,
                "STRING": T.STRING}

CONTROLS = """
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_{corrid} }} ] }}
  ]"""

STATE = """
  state [ {{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ {width} ]
            {initial} }} ]"""


def accumulator_graph(name, batch=True, width=1, corrid="UINT64", reset=True):
    lead = ["N"] if batch else []
    flag = lead + [1]
    row = lead + [width]
    nodes = [
        oh.make_node("Cast", ["START"], ["start_b"], to=T.BOOL),
        # reset=False leaves the START to the server, which feeds the initial state then.
        oh.make_node("Where", ["start_b", "zero", "ACC_IN"], ["base"]) if reset else
        oh.make_node("Identity", ["ACC_IN"], ["base"]),
        oh.make_node("Add", ["base", "INPUT"], ["OUTPUT"]),
        oh.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        oh.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
        oh.make_node("Cast", ["READY"], ["ready_i"], to=T.INT32),
        oh.make_node("Mul", ["END", "two"], ["end2"]),
        oh.make_node("Mul", ["ready_i", "four"], ["ready4"]),
        oh.make_node("Add", ["START", "end2"], ["se"]),
        oh.make_node("Add", ["se", "ready4"], ["FLAGS"]),
    ]
    inits = [onh.from_array(np.array([0], np.int32), "zero"),
             onh.from_array(np.array([2], np.int32), "two"),
             onh.from_array(np.array([4], np.int32), "four")]
    g = oh.make_graph(
        nodes, name,
        [oh.make_tensor_value_info("INPUT", T.INT32, row),
         oh.make_tensor_value_info("START", T.INT32, flag),
         oh.make_tensor_value_info("END", T.INT32, flag),
         oh.make_tensor_value_info("READY", T.BOOL, flag),
         oh.make_tensor_value_info("CORRID", CORRID_TYPES[corrid], flag),
         oh.make_tensor_value_info("ACC_IN", T.INT32, row)],
        [oh.make_tensor_value_info("OUTPUT", T.INT32, row),
         oh.make_tensor_value_info("ACC_OUT", T.INT32, row),
         oh.make_tensor_value_info("CORRID_OUT", CORRID_TYPES[corrid], flag),
         oh.make_tensor_value_info("FLAGS", T.INT32, flag)],
        inits)
    return g


def accumulator(repo, name, max_batch=4, strategy="direct { }", idle_us=0, width=1,
                corrid="UINT64", initial="", instances=1, extra="", reset=True):
    """The accumulator model and its config (inputs and outputs left to auto-completion)."""
    _save(accumulator_graph(name, batch=max_batch > 0, width=width, corrid=corrid, reset=reset),
          os.path.join(repo, name, "1", "model.onnx"))
    idle = f"max_sequence_idle_microseconds: {idle_us}" if idle_us else ""
    _write(os.path.join(repo, name, "config.pbtxt"), f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch}
sequence_batching {{
  {idle}
  {strategy}
  {CONTROLS.format(corrid=corrid)}
  {STATE.format(width=width, initial=initial)}
}}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
{extra}
""")


def growing(repo, name, max_batch=4, strategy="direct { }"):
    """A state that grows: OUTPUT = ACC_OUT = the sequence's inputs so far, in order ([N, L + 1]
    from the state [N, L] and INPUT [N, 1]); no control inputs. A sequence starts from an empty
    state ([N, 0])."""
    g = oh.make_graph(
        [oh.make_node("Concat", ["ACC_IN", "INPUT"], ["OUTPUT"], axis=1),
         oh.make_node("Identity", ["OUTPUT"], ["ACC_OUT"])], name,
        [oh.make_tensor_value_info("INPUT", T.INT32, ["N", 1]),
         oh.make_tensor_value_info("ACC_IN", T.INT32, ["N", "L"])],
        [oh.make_tensor_value_info("OUTPUT", T.INT32, ["N", "M"]),
         oh.make_tensor_value_info("ACC_OUT", T.INT32, ["N", "M"])])
    _save(g, os.path.join(repo, name, "1", "model.onnx"))
    _write(os.path.join(repo, name, "config.pbtxt"), f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch}
sequence_batching {{
  {strategy}
  state [ {{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
}}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
""")
