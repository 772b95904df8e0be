"""proto/grpc_service.proto and proto/model_config.proto are Kiln's own text of the published
protocol: every message, field name, number, type and label, and every RPC, must match what
tritonclient.grpc was generated from, or existing clients break on the wire."""
import os
import subprocess

from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2

PROTO_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "proto")


def ours(name, tmp_path):
    out = tmp_path / "set.pb"
    subprocess.run(["protoc", "-I", PROTO_DIR, f"--descriptor_set_out={out}", name], check=True)
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    return fds.file[0]


def theirs(module):
    fd = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fd)
    return fd


def fields(fd):
    out = {}
    def walk(messages, prefix):
        for m in messages:
            name = prefix + m.name
            out[name] = {f.number: (f.name, f.type, f.label, f.type_name) for f in m.field}
            walk(m.nested_type, name + ".")
    walk(fd.message_type, "")
    return out


def enums(fd):
    out = {e.name: {v.name: v.number for v in e.value} for e in fd.enum_type}
    def walk(messages, prefix):
        for m in messages:
            for e in m.enum_type:
                out[prefix + m.name + "." + e.name] = {v.name: v.number for v in e.value}
            walk(m.nested_type, prefix + m.name + ".")
    walk(fd.message_type, "")
    return out


def test_service_proto_matches_the_published_protocol(tmp_path):
    a, b = ours("grpc_service.proto", tmp_path), theirs(service_pb2)
    assert a.package == b.package == "inference"
    assert fields(a) == fields(b)
    rpcs = lambda fd: {(s.name, m.name, m.input_type, m.output_type, m.client_streaming,
                        m.server_streaming) for s in fd.service for m in s.method}
    assert rpcs(a) == rpcs(b)
    assert ("GRPCInferenceService", "ModelStreamInfer", ".inference.ModelInferRequest",
            ".inference.ModelStreamInferResponse", True, True) in rpcs(a)


def test_model_config_proto_is_wire_compatible(tmp_path):
    a, b = ours("model_config.proto", tmp_path), theirs(model_config_pb2)
    fa, fb = fields(a), fields(b)
    assert set(fa) == set(fb)
    for message in fa:
        # Wire compatibility is number, type and label; a renamed field only changes JSON.
        wire = lambda f: {n: v[1:] for n, v in f[message].items()}
        assert wire(fa) == wire(fb), message
    assert enums(a) == enums(b)
