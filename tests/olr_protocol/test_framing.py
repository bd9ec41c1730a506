"""Framing: a 4-byte little-endian length, then the bytes; whatever pieces they come in."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.olr_protocol import FrameReader, FrameTooLargeError, frame, frame_header


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_frames_come_out_whole_whatever_the_pieces(payloads, data):
    stream = b"".join(struct.pack("<I", len(p)) + p for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader(1024)
    got = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)]):
        got += reader.feed(stream[a:b])
    assert got == payloads and reader.pending == 0


def test_a_frame_is_its_length_then_its_bytes():
    assert frame(b"abc") == b"\x03\x00\x00\x00abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    # OpenLogReplicator announces 4 GiB or more with 0xFFFFFFFF and an 8-byte length
    assert frame_header(0xFFFFFFFE) == b"\xfe\xff\xff\xff"
    assert frame_header(0xFFFFFFFF) == b"\xff\xff\xff\xff" + struct.pack("<Q", 0xFFFFFFFF)
    assert FrameReader(10).feed(b"\xff\xff\xff\xff" + struct.pack("<Q", 2) + b"hi") == [b"hi"]


def test_an_oversized_length_is_refused_before_its_bytes_are_kept():
    reader = FrameReader(1024)
    assert reader.feed(struct.pack("<I", 1024) + b"x" * 10) == []  # the largest allowed: waits for the rest
    with pytest.raises(FrameTooLargeError, match="1,025 bytes"):
        FrameReader(1024).feed(struct.pack("<I", 1025))
    with pytest.raises(FrameTooLargeError):
        FrameReader(1024).feed(b"\xff\xff\xff\xff" + struct.pack("<Q", 1 << 40))
    with pytest.raises(FrameTooLargeError):  # garbage: "GET " read as a length
        FrameReader(1024).feed(b"GET / HTTP/1.1\r\n")


def test_the_frames_before_an_oversized_length_are_given_with_the_error():
    reader = FrameReader(1024)
    with pytest.raises(FrameTooLargeError) as refused:
        reader.feed(frame(b"a") + frame(b"bc") + b"GET / HTTP/1.1\r\n")
    assert refused.value.facts["frames"] == [b"a", b"bc"]
    with pytest.raises(FrameTooLargeError) as again:  # of no further use, and nothing given twice
        reader.feed(b"")
    assert again.value.facts["frames"] == []
