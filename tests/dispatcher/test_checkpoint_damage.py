"""A damaged dispatcher checkpoint or reader position is refused in one line, never used."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from olr_buffer.sources.redo.position import POSITION_PREFIX
from olr_buffer.txbuffer import LmdbQueue
from olr_buffer.txbuffer.errors import QueueCorruptError
from olr_buffer.txbuffer.metadata import CHECKPOINT_KEY, load_json, seal
from tests.cli.conftest import olr_buffer


@pytest.fixture
def replayed(tmp_path: Path) -> Path:
    simulate(tmp_path / "in", threads=2, transactions=120, seed=3, records_per_file=300)
    r = olr_buffer("replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert r.returncode == 0, r.describe()
    return tmp_path


def _rewrite_meta(queue: Path, key: bytes, change) -> None:
    q = LmdbQueue(queue)
    try:
        q.append([], {key: change(q.meta(key))})
    finally:
        q.close()


def _one_line_error(r, *words: str) -> None:
    assert r.returncode != 0, r.describe()
    assert "Traceback" not in r.stderr, r.describe()
    assert len(r.stderr_lines) == 1 and r.stderr_lines[0].startswith("olr-buffer: error:"), r.describe()
    for w in words:
        assert w in r.stderr_lines[0], r.describe()


def _digit_changed(value: bytes) -> bytes:
    m = re.search(rb'"position":(\d)', value)
    assert m, value
    digit = m.group(1)[0]
    return value[: m.start(1)] + bytes([ord("0") + (digit - ord("0") + 3) % 10]) + value[m.end(1) :]


def test_checkpoint_with_one_digit_changed_is_refused(replayed: Path):
    _rewrite_meta(replayed / "q", CHECKPOINT_KEY, _digit_changed)
    for args in (
        ("replay", replayed / "in", "--queue", replayed / "q", "--changefeed", replayed / "cf"),
        ("status", "--queue", replayed / "q"),
    ):
        _one_line_error(olr_buffer(*args), "dispatcher/checkpoint", "damaged")


@pytest.mark.parametrize("key", [CHECKPOINT_KEY, POSITION_PREFIX + b"1"])
def test_bit_flips_in_stored_metadata_give_one_line(replayed: Path, key: bytes):
    q = LmdbQueue(replayed / "q", read_only=True)
    value = q.meta(key)
    q.close()
    body = value[5:] if value[:1] != b"{" else value
    # flip bits of the stored bytes where they sit in the segment file (every copy)
    segs = sorted(glob.glob(str(replayed / "q" / "segments" / "seg-*.mdb")))
    for seg in segs:
        data = bytearray(Path(seg).read_bytes())
        at = data.find(body[:40])
        while at >= 0:
            data[at + 2] ^= 0x40  # the document's first key: '"' becomes 'b', a JSON syntax error
            data[at + 17] ^= 0x01
            at = data.find(body[:40], at + 1)
        Path(seg).write_bytes(bytes(data))
    for args in (
        ("status", "--queue", replayed / "q"),
        ("replay", replayed / "in", "--queue", replayed / "q", "--changefeed", replayed / "cf"),
    ):
        _one_line_error(olr_buffer(*args), "damaged")


def test_checkpoint_without_checksum_still_opens(replayed: Path):
    """A queue written before the checksum: its bare JSON values are read as they are."""
    q = LmdbQueue(replayed / "q")
    try:
        bare = {k: v[5:] for k, v in q.meta_items().items() if k == CHECKPOINT_KEY or k.startswith(POSITION_PREFIX)}
        assert all(v[:1] == b"{" for v in bare.values())
        q.append([], bare)
    finally:
        q.close()
    r = olr_buffer("replay", replayed / "in", "--queue", replayed / "q", "--changefeed", replayed / "cf")
    assert r.returncode == 0, r.describe()
    assert olr_buffer("status", "--queue", replayed / "q").returncode == 0


def test_envelope_round_trip_and_damage():
    body = b'{"position":12}'
    assert load_json(CHECKPOINT_KEY, seal(body)) == {"position": 12}
    assert load_json(CHECKPOINT_KEY, body) == {"position": 12}
    damaged = bytearray(seal(body))
    damaged[-3] ^= 1
    with pytest.raises(QueueCorruptError, match="checksum"):
        load_json(CHECKPOINT_KEY, bytes(damaged))
    with pytest.raises(QueueCorruptError, match="not JSON"):
        load_json(CHECKPOINT_KEY, b"{nope")


def test_a_bare_checkpoint_missing_a_field_is_refused_in_one_line(replayed: Path):
    """Without a checksum (a queue of an earlier version), damage shows as a missing field."""
    _rewrite_meta(
        replayed / "q", CHECKPOINT_KEY, lambda v: (v[5:] if v[:1] != b"{" else v).replace(b'"ended"', b'"endex"')
    )
    for args in (
        ("replay", replayed / "in", "--queue", replayed / "q", "--changefeed", replayed / "cf"),
        ("status", "--queue", replayed / "q"),
    ):
        r = olr_buffer(*args)
        if args[0] == "status" and r.returncode == 0:
            continue  # status does not read that field
        _one_line_error(r, "dispatcher/checkpoint", "damaged")
