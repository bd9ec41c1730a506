"""The handshake messages: olr-buffer's own protobuf encoder and decoder agree with
Google's protobuf runtime (the reference implementation) byte for byte, and refuse what
is not a message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.olr_protocol import MalformedMessageError, RedoRequest, RedoResponse, RequestCode, ResponseCode
from tests.olr_protocol import reference

U64 = st.integers(0, (1 << 64) - 1)
codes = st.one_of(st.integers(0, 3), st.integers(4, 1000))  # unknown codes too (proto3 enums are open)


@st.composite
def requests(draw):
    when = draw(st.sampled_from(["scn", "tms", "tm_rel", None]))
    return RedoRequest(
        code=draw(codes),
        database_name=draw(st.text(max_size=20)),
        scn=draw(U64) if when == "scn" else None,
        tms=draw(st.text(max_size=30)) if when == "tms" else None,
        tm_rel=draw(st.integers(-(1 << 63), (1 << 63) - 1)) if when == "tm_rel" else None,
        seq=draw(st.none() | U64),
        c_scn=draw(st.none() | U64),
        c_idx=draw(st.none() | U64),
    )


def _google_request(r: RedoRequest):
    m = reference.RedoRequest(code=r.code, database_name=r.database_name)
    for name in ("scn", "tms", "tm_rel", "seq", "c_scn", "c_idx"):
        if getattr(r, name) is not None:
            setattr(m, name, getattr(r, name))
    return m


@given(requests())
def test_requests_are_encoded_and_decoded_as_protobuf_does(r):
    google = _google_request(r)
    assert r.encode() == google.SerializeToString()
    assert RedoRequest.decode(google.SerializeToString()) == r
    assert RedoRequest.decode(r.encode()) == r


@given(code=codes, scn=st.none() | U64, c_scn=U64, c_idx=U64)
def test_responses_are_encoded_and_decoded_as_protobuf_does(code, scn, c_scn, c_idx):
    ours = RedoResponse(code, scn, c_scn, c_idx)
    google = reference.RedoResponse(code=code, c_scn=c_scn, c_idx=c_idx)
    if scn is not None:
        google.scn = scn
    assert ours.encode() == google.SerializeToString()
    assert RedoResponse.decode(google.SerializeToString()) == ours


def test_fields_the_decoder_does_not_know_are_skipped():
    google = reference.RedoResponse(code=ResponseCode.REPLICATE, scns="123", db="ORCL", c_scn=5, c_idx=2)
    assert RedoResponse.decode(google.SerializeToString()) == RedoResponse(ResponseCode.REPLICATE, None, 5, 2)
    # a request with OpenLogReplicator's schema filters (field 7, a message) and a fixed64 field 15
    data = RedoRequest(RequestCode.START, "ORCL", scn=9).encode() + b"\x3a\x04\x0a\x02HR" + b"\x79" + bytes(8)
    assert RedoRequest.decode(data) == RedoRequest(RequestCode.START, "ORCL", scn=9)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\x08", "truncated varint"),
        (b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "longer than 10 bytes"),
        (b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "above 64 bits"),
        (b"\x12\x05ab", "5 bytes announced, 2 left"),
        (b"\x0a\x01x", "field 1: wire type 2, expected a varint"),
        (b"\x10\x01", "field 2: wire type 0, expected a string"),
        (b"\x12\x02\xc3\x28", "not valid UTF-8"),
        (b"\x0b", "wire type 3"),
        (b"\x00\x01", "field number 0"),
        (b"\x79\x01\x02", "truncated fixed-width"),
    ],
)
def test_what_is_not_a_request_is_refused_with_the_reason(data, reason):
    with pytest.raises(MalformedMessageError, match=reason):
        RedoRequest.decode(data)


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_are_refused_never_worse(data):
    try:
        RedoRequest.decode(data)
    except MalformedMessageError:
        pass


def test_the_last_member_of_a_oneof_wins():
    data = RedoRequest(RequestCode.START, scn=5).encode() + RedoRequest(RequestCode.START, tms="2024-01-01").encode()
    assert RedoRequest.decode(data) == RedoRequest(RequestCode.START, tms="2024-01-01")
    assert reference.RedoRequest.FromString(data).WhichOneof("tm_val") == "tms"
