"""Google's protobuf runtime, given the messages of contracts section 6 (built here from
the contract's field list, as a descriptor: no protoc, no generated code), to check
olr-buffer's own encoder and decoder against the reference implementation."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _build():
    fdp = descriptor_pb2.FileDescriptorProto(
        name="olr_buffer_test_requests.proto", package="OpenLogReplicator.pb", syntax="proto3"
    )
    for name, values in (
        ("RequestCode", ["INFO", "START", "CONTINUE", "CONFIRM"]),
        (
            "ResponseCode",
            [
                "READY",
                "FAILED_START",
                "STARTING",
                "ALREADY_STARTED",
                "REPLICATE",
                "PAYLOAD",
                "INVALID_DATABASE",
                "INVALID_COMMAND",
            ],
        ),
    ):
        enum = fdp.enum_type.add(name=name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)

    def field(msg, name, number, kind, *, type_name=None, oneof=None, label=_F.LABEL_OPTIONAL, proto3_optional=False):
        f = msg.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof
        if proto3_optional:
            f.proto3_optional = True
        return f

    req = fdp.message_type.add(name="RedoRequest")
    field(req, "code", 1, _F.TYPE_ENUM, type_name=".OpenLogReplicator.pb.RequestCode")
    field(req, "database_name", 2, _F.TYPE_STRING)
    req.oneof_decl.add(name="tm_val")
    field(req, "scn", 3, _F.TYPE_UINT64, oneof=0)
    field(req, "tms", 4, _F.TYPE_STRING, oneof=0)
    field(req, "tm_rel", 5, _F.TYPE_INT64, oneof=0)
    # proto3 `optional`: a synthetic oneof each, after the real ones
    for i, (name, number) in enumerate((("seq", 6), ("c_scn", 8), ("c_idx", 9)), start=1):
        req.oneof_decl.add(name=f"_{name}")
        field(req, name, number, _F.TYPE_UINT64, oneof=i, proto3_optional=True)

    resp = fdp.message_type.add(name="RedoResponse")
    field(resp, "code", 1, _F.TYPE_ENUM, type_name=".OpenLogReplicator.pb.ResponseCode")
    resp.oneof_decl.add(name="scn_val")
    field(resp, "scn", 2, _F.TYPE_UINT64, oneof=0)
    field(resp, "scns", 3, _F.TYPE_STRING, oneof=0)
    field(resp, "db", 8, _F.TYPE_STRING)
    field(resp, "c_scn", 10, _F.TYPE_UINT64)
    field(resp, "c_idx", 11, _F.TYPE_UINT64)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("OpenLogReplicator.pb.RedoRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("OpenLogReplicator.pb.RedoResponse")),
    )


RedoRequest, RedoResponse = _build()
