"""Kiln and the real Triton side by side on the same models (tests/server/triton_models.py), and
the helpers the differential tests compare their answers with. Each comparison is counted, and
`KILN_TRITON_DIFF_LOG=<file>` appends one JSON line per comparison (for bench/results)."""
import http.client
import json
import os
import re

import pytest

import grpc_util
import triton_models
from triton import Triton


class Pair:
    def __init__(self, kiln, triton):
        self.kiln, self.triton = kiln, triton

    def both(self):
        return (("kiln", self.kiln), ("triton", self.triton))


def start_pair(serve, tmp_path_factory, kiln_args=(), triton_args=(), extra=None):
    """Both servers on the models of triton_models.py; `extra(repo)`, when given, adds what is
    the same for both (ensembles) to each repository first."""
    tmp = str(tmp_path_factory.mktemp("triton_diff"))
    triton_repo = triton_models.triton_repo(os.path.join(tmp, "triton_repo"))
    kiln_repo = triton_models.kiln_repo(os.path.join(tmp, "kiln_repo"))
    for repo in (triton_repo, kiln_repo):
        if extra:
            extra(repo)
    triton = Triton(tmp, triton_repo, list(triton_args))
    kiln = grpc_util.start(serve, kiln_repo, *kiln_args)
    try:
        triton.wait_ready()
    except BaseException:
        triton.stop()
        raise
    return Pair(kiln, triton), triton


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    p, triton = start_pair(serve, tmp_path_factory)
    yield p
    triton.stop()


def http_answer(server, method, path, body=None, headers=None, port=None):
    """(status, content type, body as JSON when it parses, else text) of one HTTP request."""
    conn = http.client.HTTPConnection("localhost", port or server.http_port, timeout=60)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        ctype = r.getheader("Content-Type")
    finally:
        conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return {"status": r.status, "content_type": ctype, "body": parsed}


def _log(what, kiln, triton, equal):
    path = os.environ.get("KILN_TRITON_DIFF_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"check": what, "equal": equal, "kiln": kiln, "triton": triton},
                               default=str) + "\n")


def same(what, kiln, triton):
    """Asserts that the two servers' (normalized) answers are equal, saying which check differs."""
    equal = kiln == triton
    _log(what, kiln, triton, equal)
    assert equal, f"{what}: Kiln and Triton differ\n  kiln:   {kiln}\n  triton: {triton}"


# Where the two servers' texts may differ only by names: the servers' own names, the order in
# which Triton lists input names (its hash map's), and Triton's empty list printed as "]".
_NAMES = [(re.compile(r"\bkiln\b"), "<server>"), (re.compile(r"\btriton\b"), "<server>"),
          (re.compile(r"input\(s\) \]"), "input(s) []")]
_NAME_LIST = re.compile(r"input\(s\) \[([^\]]*)\]")


def normalize_text(text):
    for pattern, repl in _NAMES:
        text = pattern.sub(repl, text)
    return _NAME_LIST.sub(
        lambda m: "input(s) [" + ",".join(sorted(filter(None, m.group(1).split(",")))) + "]", text)


def error_text(kiln, triton):
    """(kiln, triton) error texts normalized; where Kiln says Triton's words and then, in
    parentheses, which input and why, only Triton's words are compared (docs/SERVER.md)."""
    kiln, triton = normalize_text(kiln), normalize_text(triton)
    if kiln.startswith(triton + " ("):
        kiln = triton
    return kiln, triton


def errors_of(kiln, triton):
    """Both answers with their JSON error texts compared as error_text does."""
    kiln, triton = dict(kiln), dict(triton)
    kb, tb = kiln.get("body"), triton.get("body")
    if isinstance(kb, dict) and isinstance(tb, dict) and isinstance(kb.get("error"), str) and \
            isinstance(tb.get("error"), str):
        k, t = error_text(kb["error"], tb["error"])
        kiln["body"], triton["body"] = {**kb, "error": k}, {**tb, "error": t}
    return kiln, triton


def fp32_request(rows=1, extra=None, inputs=None):
    data = [float(i) for i in range(4 * rows)]
    req = {"inputs": inputs if inputs is not None else [
        {"name": "INPUT0", "shape": [rows, 4], "datatype": "FP32", "data": data},
        {"name": "INPUT1", "shape": [rows, 4], "datatype": "FP32", "data": data}]}
    req.update(extra or {})
    return req
