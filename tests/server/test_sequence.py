"""The sequence batcher (config `sequence_batching`, Triton's stateful models) on a real kiln-serve
with the real tritonclient over HTTP, gRPC and gRPC streaming: an accumulator with an implicit
state run as interleaved sequences (exact values, the control inputs the server fills per row),
START resetting a live sequence, the oldest strategy batching sequences together, a model without
a batch dim, an initial state read from a file, the idle timeout freeing a slot for the backlog,
the backlog bound, Triton's request errors, the state memory budget, and configs refused at load
with their messages."""
import json
import os
import queue
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import ensembles
import grpc_util
import sequences

IDLE_US = 1000000  # acc_idle and acc_one: a sequence idle this long loses its slot


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("sequences"))
    sequences.accumulator(repo, "acc")
    sequences.accumulator(repo, "acc_str", corrid="STRING")
    # The state output listed under `output`: clients may read it too (Triton's debugging aid).
    sequences.accumulator(repo, "acc_debug", extra='output [ { name: "ACC_OUT" } ]')
    sequences.accumulator(repo, "acc_wide", width=3, instances=2)
    sequences.accumulator(repo, "acc_nobatch", max_batch=0)
    sequences.accumulator(repo, "acc_oldest", strategy="""oldest {
    max_candidate_sequences: 8 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }""")
    sequences.accumulator(repo, "acc_idle", idle_us=IDLE_US)
    # An idle limit of 2^64 - 1 us means never (the deadline arithmetic saturates).
    sequences.accumulator(repo, "acc_forever", idle_us=2**64 - 1)
    # One slot in all: a second sequence waits in the backlog (64 sequences at most).
    sequences.accumulator(repo, "acc_one", max_batch=1, idle_us=IDLE_US)
    init = os.path.join(repo, "acc_init", "initial_state")
    sequences.accumulator(repo, "acc_init", initial="""initial_state: { data_type: TYPE_INT32
        dims: [ 1 ] name: "hundred" data_file: "hundred.bin" }""", reset=False)
    os.makedirs(init, exist_ok=True)
    np.array([100], np.int32).tofile(os.path.join(init, "hundred.bin"))
    sequences.accumulator(repo, "acc_zero_init", initial="""initial_state: { data_type: TYPE_INT32
        dims: [ 1 ] name: "zeros" zero_data: true }""", reset=False)
    sequences.growing(repo, "grow", strategy="""oldest {
    max_candidate_sequences: 4 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 300000 }""")
    # An ensemble whose one step is the accumulator: the step gets the request's sequence.
    ensembles.write(repo, ensembles.ensemble(
        "ens_acc", [("acc", -1, {"INPUT": "IN"}, {"OUTPUT": "OUT"})],
        inputs=(("IN", "TYPE_INT32", [1]),), outputs=(("OUT", "TYPE_INT32", [1]),), max_batch=4))
    # A state of 4 MiB per sequence against a 16 MiB request memory budget.
    sequences.accumulator(repo, "acc_big", width=1 << 20, max_batch=8, idle_us=IDLE_US)
    return grpc_util.start(serve, repo, "--request-memory-bytes=16777216")


def http_step(client, model, value, seq, start=False, end=False, outputs=None, width=1):
    x = httpclient.InferInput("INPUT", [1, width], "INT32")
    x.set_data_from_numpy(np.full((1, width), value, np.int32))
    r = client.infer(model, [x], sequence_id=seq, sequence_start=start, sequence_end=end)
    return r


def grpc_input(value, width=1, batched=True):
    shape = [1, width] if batched else [width]
    x = grpcclient.InferInput("INPUT", shape, "INT32")
    x.set_data_from_numpy(np.full(shape, value, np.int32))
    return x


def flags(start, end):
    return int(start) + 2 * int(end) + 4


def test_interleaved_http(server):
    """Three sequences interleaved request by request: each accumulates its own values only."""
    c = server.client()
    seqs = {11: [1, 2, 3, 4], 12: [10, 20, 30, 40], 13: [-5, 7, 100, 1]}
    sums = {s: 0 for s in seqs}
    for i in range(4):
        for s, values in seqs.items():
            start, end = i == 0, i == 3
            r = http_step(c, "acc", values[i], s, start, end)
            sums[s] += values[i]
            assert r.as_numpy("OUTPUT").tolist() == [[sums[s]]]
            assert r.as_numpy("FLAGS").tolist() == [[flags(start, end)]]
            assert r.as_numpy("CORRID_OUT").tolist() == [[s]]
    # The state output stays the server's: auto-completion does not list it for clients.
    outputs = [o["name"] for o in c.get_model_metadata("acc")["outputs"]]
    assert sorted(outputs) == ["CORRID_OUT", "FLAGS", "OUTPUT"]
    inputs = [i["name"] for i in c.get_model_metadata("acc")["inputs"]]
    assert inputs == ["INPUT"]
    config = c.get_model_config("acc")
    assert config["sequence_batching"]["max_sequence_idle_microseconds"] == 1000000
    assert "sequence" in c.get_server_metadata()["extensions"]


def test_ensemble_step_gets_the_sequence(server):
    c = server.client()
    for i, v in enumerate([3, 4, 5]):
        x = httpclient.InferInput("IN", [1, 1], "INT32")
        x.set_data_from_numpy(np.full((1, 1), v, np.int32))
        r = c.infer("ens_acc", [x], sequence_id=314, sequence_start=i == 0, sequence_end=i == 2)
        assert r.as_numpy("OUT").tolist() == [[[3, 7, 12][i]]]
    x = httpclient.InferInput("IN", [1, 1], "INT32")
    x.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException, match="must specify a non-zero or non-empty"):
        c.infer("ens_acc", [x])


def test_largest_ids(server):
    """The whole uint64 range over HTTP (JSON); over gRPC tritonclient sends int64 parameters."""
    big = 2**64 - 1
    r = http_step(server.client(), "acc", 1, big, start=True, end=True)
    assert r.as_numpy("CORRID_OUT").tolist() == [[big]]
    r = server.grpc_client().infer("acc", [grpc_input(2)], sequence_id=2**63 - 1, sequence_start=True,
                                   sequence_end=True)
    assert r.as_numpy("CORRID_OUT").tolist() == [[2**63 - 1]]


def test_listed_state_output_is_readable(server):
    c = server.client()
    outputs = sorted(o["name"] for o in c.get_model_metadata("acc_debug")["outputs"])
    assert outputs == ["ACC_OUT", "CORRID_OUT", "FLAGS", "OUTPUT"]
    for i, v in enumerate([4, 5]):
        x = httpclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.full((1, 1), v, np.int32))
        r = c.infer("acc_debug", [x], sequence_id=88, sequence_start=i == 0, sequence_end=i == 1,
                    outputs=[httpclient.InferRequestedOutput("ACC_OUT")])
        assert r.as_numpy("ACC_OUT").tolist() == [[[4, 9][i]]]
        assert r.as_numpy("OUTPUT") is None


def test_start_resets_live_sequence(server):
    c = server.client()
    assert http_step(c, "acc", 5, 21, start=True).as_numpy("OUTPUT")[0, 0] == 5
    assert http_step(c, "acc", 6, 21).as_numpy("OUTPUT")[0, 0] == 11
    # START again without an END: the state starts over (Triton logs a conflict).
    assert http_step(c, "acc", 7, 21, start=True).as_numpy("OUTPUT")[0, 0] == 7
    assert http_step(c, "acc", 1, 21, end=True).as_numpy("OUTPUT")[0, 0] == 8
    assert "has a conflict" in server.output()


def test_grpc_string_ids(server):
    """String correlation IDs, with a TYPE_STRING CORRID control."""
    c = server.grpc_client()
    total = {"alpha": 0, "beta": 0}
    for i, v in enumerate([3, 4, 5]):
        for s in total:
            r = c.infer("acc_str", [grpc_input(v if s == "alpha" else 10 * v)], sequence_id=s,
                        sequence_start=i == 0, sequence_end=i == 2)
            total[s] += v if s == "alpha" else 10 * v
            assert r.as_numpy("OUTPUT").tolist() == [[total[s]]]
            assert r.as_numpy("CORRID_OUT").tolist() == [[s.encode()]]
    # A number is another sequence than the same digits as a string, and the wrong kind here.
    with pytest.raises(InferenceServerException, match="must specify a string correlation ID"):
        c.infer("acc_str", [grpc_input(1)], sequence_id=5, sequence_start=True)


def test_grpc_concurrent_sequences_wide(server):
    """Eight sequences at once on two instances, a 3-wide state: async gRPC requests, each sequence
    sending its next request when the previous one answered."""
    c = server.grpc_client()
    results = queue.Queue()
    steps = 6

    def run(seq):
        total = np.zeros((1, 3), np.int64)
        for i in range(steps):
            v = np.array([[seq, i, seq * i]], np.int32)
            x = grpcclient.InferInput("INPUT", [1, 3], "INT32")
            x.set_data_from_numpy(v)
            r = c.infer("acc_wide", [x], sequence_id=seq, sequence_start=i == 0,
                        sequence_end=i == steps - 1)
            total += v
            if r.as_numpy("OUTPUT").tolist() != total.tolist():
                results.put((seq, i, r.as_numpy("OUTPUT").tolist(), total.tolist()))
                return
        results.put((seq, "ok"))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(100, 108)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    got = [results.get_nowait() for _ in threads]
    assert all(g[1] == "ok" for g in got), got


def test_grpc_stream(server):
    """ModelStreamInfer: two sequences interleaved on one stream, answered in order."""
    c = server.grpc_client()
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        plan = [(31, 1, True, False), (32, 100, True, False), (31, 2, False, False),
                (32, 200, False, True), (31, 3, False, True)]
        for seq, v, start, end in plan:
            c.async_stream_infer("acc", [grpc_input(v)], sequence_id=seq, sequence_start=start,
                                 sequence_end=end, request_id=f"{seq}-{v}")
        got = {}
        for _ in plan:
            result, error = answers.get(timeout=60)
            assert error is None, error
            got[result.get_response().id] = (result.as_numpy("OUTPUT")[0, 0],
                                             result.as_numpy("FLAGS")[0, 0])
        assert got == {"31-1": (1, 5), "32-100": (100, 5), "31-2": (3, 4), "32-200": (300, 6),
                       "31-3": (6, 6)}
        # Errors come back on the stream too, with Triton's message.
        c.async_stream_infer("acc", [grpc_input(1)], sequence_id=31)
        result, error = answers.get(timeout=60)
        assert result is None and "must specify the START flag" in str(error)
    finally:
        c.stop_stream()


def test_oldest_batches_sequences(server):
    """The oldest strategy holds requests of different sequences for a preferred batch of 4:
    four sequences sent at once run in one execution."""
    c = server.grpc_client()
    before = c.get_inference_statistics("acc_oldest", as_json=True)["model_stats"][0]
    done = queue.Queue()
    for seq in range(41, 45):
        c.async_infer("acc_oldest", [grpc_input(seq)], lambda result, error: done.put((result, error)),
                      sequence_id=seq, sequence_start=True)
    outs = []
    for _ in range(4):
        r, e = done.get(timeout=60)
        assert e is None, e
        outs.append(int(r.as_numpy("OUTPUT")[0, 0]))
        assert int(r.as_numpy("CORRID_OUT")[0, 0]) == outs[-1]
    assert sorted(outs) == [41, 42, 43, 44]
    after = c.get_inference_statistics("acc_oldest", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == 4
    assert int(after["execution_count"]) - int(before.get("execution_count", 0)) == 1
    # The next requests go together too (one alone would wait out the 2 s delay, longer than the
    # 1 s idle limit of the others).
    for seq in range(41, 45):
        c.async_infer("acc_oldest", [grpc_input(1)], lambda result, error: done.put((result, error)),
                      sequence_id=seq, sequence_end=True)
    outs = []
    for _ in range(4):
        r, e = done.get(timeout=60)
        assert e is None, e
        outs.append((int(r.as_numpy("CORRID_OUT")[0, 0]), int(r.as_numpy("OUTPUT")[0, 0])))
    assert sorted(outs) == [(seq, seq + 1) for seq in range(41, 45)]


def test_growing_state(server):
    """A state with a variable dim grows by a row each request; sequences whose states differ in
    length never share an execution, those of the same length do."""
    c = server.grpc_client()
    done = queue.Queue()

    def send(seq, value, rid, **flags):
        c.async_infer("grow", [grpc_input(value)], lambda result, error: done.put((result, error)),
                      sequence_id=seq, request_id=rid, **flags)

    def answers(n):
        out = {}
        for _ in range(n):
            r, e = done.get(timeout=60)
            assert e is None, e
            out[r.get_response().id] = r.as_numpy("OUTPUT").tolist()
        return out

    def executions():
        return int(c.get_inference_statistics("grow", as_json=True)["model_stats"][0]
                   .get("execution_count", 0))

    send(501, 1, "a1", sequence_start=True)
    assert answers(1) == {"a1": [[1]]}
    # 501 has a state of length 1, 502 starts from length 0: two executions.
    before = executions()
    send(501, 2, "a2")
    send(502, 7, "b1", sequence_start=True)
    assert answers(2) == {"a2": [[1, 2]], "b1": [[7]]}
    assert executions() - before == 2
    # 502 catches up; then both states have length 2 and their last requests run together.
    send(502, 8, "b2")
    assert answers(1) == {"b2": [[7, 8]]}
    before = executions()
    send(501, 3, "a3", sequence_end=True)
    send(502, 9, "b3", sequence_end=True)
    assert answers(2) == {"a3": [[1, 2, 3]], "b3": [[7, 8, 9]]}
    assert executions() - before == 1


def test_no_batch_dim(server):
    c = server.grpc_client()
    for i, v in enumerate([2, 3, 4]):
        r = c.infer("acc_nobatch", [grpc_input(v, batched=False)], sequence_id=77,
                    sequence_start=i == 0, sequence_end=i == 2)
        assert r.as_numpy("OUTPUT").tolist() == [[2, 5, 9][i]]
        assert r.as_numpy("FLAGS").tolist() == [flags(i == 0, i == 2)]


def test_initial_state(server):
    c = server.client()
    """acc_init leaves START to the server: a sequence starts from the file's 100, and a START
    on the live sequence starts it from 100 again."""
    assert http_step(c, "acc_init", 5, 1, start=True).as_numpy("OUTPUT")[0, 0] == 105
    assert http_step(c, "acc_init", 5, 1).as_numpy("OUTPUT")[0, 0] == 110
    assert http_step(c, "acc_init", 1, 1, start=True).as_numpy("OUTPUT")[0, 0] == 101
    assert http_step(c, "acc_init", 5, 1, end=True).as_numpy("OUTPUT")[0, 0] == 106
    assert http_step(c, "acc_zero_init", 5, 1, start=True, end=True).as_numpy("OUTPUT")[0, 0] == 5


def test_request_errors_http(server):
    c = server.client()
    x = httpclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(np.ones((1, 1), np.int32))
    cases = [
        (dict(), "inference request to model 'acc' must specify a non-zero or non-empty "
                 "correlation ID"),
        (dict(sequence_id=0, sequence_start=True), "must specify a non-zero or non-empty"),
        (dict(sequence_id=987654), "inference request for sequence 987654 to model 'acc' must "
                                   "specify the START flag on the first request of the sequence"),
        (dict(sequence_id="s1", sequence_start=True),
         "inference request to model 'acc' must specify an integer correlation ID"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InferenceServerException) as e:
            c.infer("acc", [x], **kwargs)
        assert e.value.status() == "400"
        assert message in e.value.message(), e.value.message()
    x2 = httpclient.InferInput("INPUT", [2, 1], "INT32")
    x2.set_data_from_numpy(np.ones((2, 1), np.int32))
    with pytest.raises(InferenceServerException, match="must specify batch-size 1 due to "
                                                      "requirements of sequence batcher"):
        c.infer("acc", [x2], sequence_id=5, sequence_start=True)
    # After its END the ID no longer names a sequence.
    http_step(c, "acc", 1, 555, start=True, end=True)
    with pytest.raises(InferenceServerException, match="sequence 555 .* must specify the START"):
        http_step(c, "acc", 1, 555)
    # The server fills the control and state inputs; a client may not send them.
    s = httpclient.InferInput("START", [1, 1], "INT32")
    s.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException):
        c.infer("acc", [x, s], sequence_id=556, sequence_start=True)


def test_request_errors_grpc(server):
    c = server.grpc_client()
    with pytest.raises(InferenceServerException) as e:
        c.infer("acc", [grpc_input(1)])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify a non-zero or non-empty correlation ID" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        c.infer("acc", [grpc_input(1)], sequence_id=424242)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify the START flag" in e.value.message()


def test_idle_timeout_frees_sequence(server):
    c = server.client()
    assert http_step(c, "acc_idle", 4, 61, start=True).as_numpy("OUTPUT")[0, 0] == 4
    assert http_step(c, "acc_idle", 4, 61).as_numpy("OUTPUT")[0, 0] == 8
    time.sleep(IDLE_US / 1e6 * 2)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_step(c, "acc_idle", 4, 61)
    # START makes it a new sequence from the initial state.
    assert http_step(c, "acc_idle", 4, 61, start=True, end=True).as_numpy("OUTPUT")[0, 0] == 4


def test_idle_limit_near_2_64_is_never(server):
    c = server.client()
    assert http_step(c, "acc_forever", 1, 62, start=True).as_numpy("OUTPUT")[0, 0] == 1
    time.sleep(0.2)
    assert http_step(c, "acc_forever", 2, 62, end=True).as_numpy("OUTPUT")[0, 0] == 3


def test_backlog_waits_for_idle_slot(server):
    """acc_one has one slot: a second sequence waits in the backlog until the first one has been
    idle past the limit, then runs; the first is gone."""
    c = server.grpc_client()
    assert c.infer("acc_one", [grpc_input(1)], sequence_id=71,
                   sequence_start=True).as_numpy("OUTPUT")[0, 0] == 1
    t0 = time.monotonic()
    r = c.infer("acc_one", [grpc_input(2)], sequence_id=72, sequence_start=True, sequence_end=True)
    waited = time.monotonic() - t0
    assert r.as_numpy("OUTPUT")[0, 0] == 2
    assert waited >= IDLE_US / 1e6 * 0.8, waited
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        c.infer("acc_one", [grpc_input(1)], sequence_id=71)


def test_backlog_bound(server):
    """With the slot held, 64 more sequences wait in the backlog; the 65th is refused (503)."""
    c = server.grpc_client()
    c.infer("acc_one", [grpc_input(1)], sequence_id=80, sequence_start=True)
    done = queue.Queue()
    for seq in range(1000, 1064):
        c.async_infer("acc_one", [grpc_input(seq)], lambda result, error: done.put((result, error)),
                      sequence_id=seq, sequence_start=True, sequence_end=True)
    server.wait_pending("acc_one", 64)
    with pytest.raises(InferenceServerException) as e:
        c.infer("acc_one", [grpc_input(1)], sequence_id=2000, sequence_start=True)
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert "backlog of 64 sequences is full" in e.value.message()
    # The held sequence idles out; the backlog runs, each a one-request sequence.
    outs = sorted(int(done.get(timeout=60)[0].as_numpy("OUTPUT")[0, 0]) for _ in range(64))
    assert outs == list(range(1000, 1064))


def test_state_memory_budget(server):
    """Each acc_big sequence holds a 4 MiB state from the 16 MiB request memory (which the 4 MiB
    requests themselves use too): a few sequences start, the next is refused; once a sequence
    ends its memory is free again."""
    c = server.grpc_client()
    width = 1 << 20
    x = grpcclient.InferInput("INPUT", [1, width], "INT32")
    x.set_data_from_numpy(np.ones((1, width), np.int32))
    started = []
    refused = None
    for seq in range(1, 6):
        try:
            r = c.infer("acc_big", [x], sequence_id=seq, sequence_start=True,
                        outputs=[grpcclient.InferRequestedOutput("FLAGS")])
            started.append(seq)
        except InferenceServerException as e:
            refused = e
            break
    assert refused is not None and refused.status() == "StatusCode.UNAVAILABLE", started
    assert "request memory budget" in refused.message()
    assert 1 <= len(started) <= 3
    c.infer("acc_big", [x], sequence_id=started[0], sequence_end=True,
            outputs=[grpcclient.InferRequestedOutput("FLAGS")])
    r = c.infer("acc_big", [x], sequence_id=99, sequence_start=True, sequence_end=True,
                outputs=[grpcclient.InferRequestedOutput("OUTPUT")])
    assert int(r.as_numpy("OUTPUT")[0, 5]) == 1


# ---- configs refused at load -------------------------------------------------------------------

BAD_CONFIGS = [
    ("missing false/true", 'control_input [ { name: "START" control [ { kind: '
     'CONTROL_SEQUENCE_START } ] } ]',
     "sequence batching must specify exactly one of 'int32_false_true', 'fp32_false_true' and "
     "'bool_false_true' for CONTROL_SEQUENCE_START for bad"),
    ("three values", 'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
     'int32_false_true: [ 0, 1, 2 ] } ] } ]',
     "sequence batching control 'int32_false_true' must have exactly 2 entries for "
     "CONTROL_SEQUENCE_START for bad"),
    ("two starts", 'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
     'int32_false_true: [ 0, 1 ] } ] }, { name: "END" control [ { kind: CONTROL_SEQUENCE_START '
     'int32_false_true: [ 0, 1 ] } ] } ]',
     "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for bad"),
    ("corrid type", 'control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
     'data_type: TYPE_FP32 } ] } ]', "must have data_type TYPE_UINT64"),
    ("unknown control input", 'control_input [ { name: "NOPE" control [ { kind: '
     'CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]',
     "control input 'NOPE' is not a tensor of the model"),
    ("control dtype", 'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
     'fp32_false_true: [ 0, 1 ] } ] } ]', "control input 'START' is int32"),
    ("state not in model", 'state [ { input_name: "X" output_name: "ACC_OUT" data_type: '
     'TYPE_INT32 dims: [ 1 ] } ]', "state input 'X' is not a tensor of the model"),
    ("initial dims", 'state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
     'dims: [ 1 ] initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "z" } } ]',
     "'initial_state' dim for input name 'ACC_IN' doesn't match 'state' dim description. 2 != 1"),
    ("initial name", 'state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
     'dims: [ 1 ] initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]',
     "Field 'name' must be set when using initial_state for state input 'ACC_IN'."),
    ("initial file escapes", 'state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: '
     'TYPE_INT32 dims: [ 1 ] initial_state { data_type: TYPE_INT32 dims: [ 1 ] name: "f" '
     'data_file: "../config.pbtxt" } } ]', "must be a file name inside the model's initial_state"),
    ("iterative", "iterative_sequence: true", "iterative_sequence is not supported"),
    ("oldest preferred", "oldest { preferred_batch_size: [ 9 ] }",
     "preferred batch size 9 must be in 1..max_batch_size (4)"),
]


@pytest.fixture(scope="module")
def explicit(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("sequences_explicit"))
    sequences.accumulator(repo, "bad")
    server = serve(repo, "--model-control-mode=explicit")
    server.repo = repo
    return server


def _write_config(server, text):
    with open(os.path.join(server.repo, "bad", "config.pbtxt"), "w") as f:
        f.write(text)


@pytest.mark.parametrize("case,body,message", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_bad_configs_refused(explicit, case, body, message):
    _write_config(explicit, 'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
                  f"sequence_batching {{ {body} }}\n")
    with pytest.raises(InferenceServerException) as e:
        explicit.client().load_model("bad")
    assert message in e.value.message(), e.value.message()


def test_response_cache_refused(explicit):
    _write_config(explicit, 'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
                  "sequence_batching { }\nresponse_cache { enable: true }\n")
    with pytest.raises(InferenceServerException, match="response cache is not supported for a "
                                                       "sequence batching model"):
        explicit.client().load_model("bad")


def test_good_config_loads_in_explicit_mode(explicit):
    sequences.accumulator(explicit.repo, "bad")  # the original, valid config
    c = explicit.client()
    c.load_model("bad")
    assert http_step(c, "bad", 3, 9, start=True, end=True).as_numpy("OUTPUT")[0, 0] == 3
    c.unload_model("bad")
