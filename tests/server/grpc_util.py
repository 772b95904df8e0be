"""gRPC side of the server tests: start kiln-serve with a gRPC port, wait for it, make clients."""
import time

import numpy as np
import tritonclient.grpc as grpcclient
from conftest import free_port


def start(serve, repo, *args, wait=True, **client_kwargs):
    """Starts kiln-serve (HTTP and gRPC) through the conftest `serve` fixture; the returned
    server has grpc_port, grpc_url and grpc_client()."""
    port = free_port()
    server = serve(repo, f"--grpc-port={port}", *args, wait=wait)
    server.grpc_port = port
    server.grpc_url = f"localhost:{port}"
    server.grpc_client = lambda **kw: grpcclient.InferenceServerClient(server.grpc_url, **kw)
    if wait:
        wait_live(server, **client_kwargs)
    return server


def wait_live(server, timeout=60, **client_kwargs):
    """The gRPC listener starts after the HTTP one: wait until it answers too."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            with grpcclient.InferenceServerClient(server.grpc_url, **client_kwargs) as c:
                if c.is_server_live():
                    return server
        except Exception as e:  # noqa: BLE001 - not up yet
            last = e
        time.sleep(0.1)
    raise RuntimeError(f"gRPC did not come up ({last}): {server.output()}")


def inputs(arrays, datatype, names=("INPUT0", "INPUT1")):
    """tritonclient.grpc inputs (raw_input_contents) from numpy arrays."""
    out = []
    for name, arr in zip(names, arrays):
        inp = grpcclient.InferInput(name, list(arr.shape), datatype)
        inp.set_data_from_numpy(arr)
        out.append(inp)
    return out


def ones_fp32(rows=1):
    return inputs([np.ones((rows, 4), np.float32)] * 2, "FP32")
