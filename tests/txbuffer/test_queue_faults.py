"""Queue faults, for real: a disk that fills (a small tmpfs; root only, skipped otherwise)
and a damaged queue block. The run stops cleanly, publishes no wrong row, and resumes.
"""

from __future__ import annotations

import random
from pathlib import Path

import lmdb
import pytest

from olr_buffer.changes import read_summary
from olr_buffer.txbuffer.block import HEADER_SIZE, key_index, thread_codec
from tests.cli.conftest import ok
from tests.contract_model import ModelResult, expected_changefeed
from tests.fault_helpers import (
    FULL_ARGS,
    ROOT,
    big_base,  # noqa: F401 (a fixture the tests request by name)
    big_model,  # noqa: F401 (a fixture the tests request by name)
    dumps,
    exact,
    grow,
    no_tmp_files,
    one_line_error,
    part_bytes,
    published_prefix,
    replay,
    tmpfs,
)

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


def test_queue_disk_full_stops_cleanly_and_resumes(big_base: Path, big_model: ModelResult, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(q, "500k"):
        failed = replay(big_base, q, cf, *FULL_ARGS)
        line = one_line_error(failed)
        assert str(q) in line, line
        no_tmp_files(cf)
        published_prefix(cf, big_model)
        before = part_bytes(cf)
        grow(q)
        ok(replay(big_base, q, cf, *FULL_ARGS))
        exact(cf, big_model)
        after = part_bytes(cf)
        assert {n: after.get(n) for n in before} == before, "a published file changed"


def test_queue_disk_full_message_says_no_space(big_base: Path, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(q, "500k"):
        one_line_error(replay(big_base, q, cf, *FULL_ARGS), "no space left on device", "hint:")


def test_a_new_segment_on_a_full_disk_is_an_error_not_a_bus_error(tmp_path: Path) -> None:
    """LMDB maps a segment's lock file and writes it through the map: on a full file
    system that killed the process with SIGBUS (exit 135, no word) when a segment was
    created. Its blocks are allocated first now: a QueueFullError, then, once there is
    space, the same queue goes on."""
    import subprocess
    import sys

    q = tmp_path / "queue"
    script = (
        "import sys; from olr_buffer.txbuffer import LmdbQueue; q = LmdbQueue(sys.argv[1]); "
        "q.append([b'x' * 100]); print(q.next_index)"
    )
    with tmpfs(q, "1m"):
        filler = q / "filler"
        with open(filler, "wb", buffering=0) as fh:  # every block of the file system taken
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        r = subprocess.run([sys.executable, "-c", script, str(q)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
        assert "QueueFullError" in r.stderr and "no space left on device" in r.stderr, r.stderr[-2000:]
        assert not list((q / "segments").glob("seg-*.mdb")), "a segment left half created"
        filler.unlink()
        r = subprocess.run([sys.executable, "-c", script, str(q)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr[-2000:]
        lock = next((q / "segments").glob("seg-*.mdb-lock"))
        assert lock.stat().st_blocks * 512 >= 64 << 10  # allocated before LMDB mapped it


# ---------------------------------------------------------------------------------------
# A damaged queue block


def _pad(rng: random.Random) -> str:
    return rng.randbytes(120).hex()  # does not compress away


def _corruption_input(inp: Path) -> None:
    """Thread 1, sequence 1: 40 committed transactions, then X: a begin and 600 rows that
    span several queue segments, no commit. Sequence 2 (added later) commits X, then Z."""
    rng = random.Random(3)
    inp.mkdir()
    out, scn = [], 1000
    for i in range(40):
        xid = f"F{i:03d}"
        out.append(dumps({"op": "begin", "scn": scn, "xid": xid}))
        out.append(
            dumps(
                {
                    "op": "insert",
                    "scn": scn + 1,
                    "xid": xid,
                    "owner": "APP",
                    "table": "T",
                    "rid": f"f{i}",
                    "after": {"PAD": _pad(rng)},
                }
            )
        )
        out.append(dumps({"op": "commit", "scn": scn + 2, "xid": xid, "tm": scn}))
        scn += 3
    out.append(dumps({"op": "begin", "scn": scn, "xid": "X"}))
    for i in range(600):
        scn += 1
        out.append(
            dumps(
                {
                    "op": "insert",
                    "scn": scn,
                    "xid": "X",
                    "owner": "APP",
                    "table": "T",
                    "rid": f"x{i}",
                    "after": {"PAD": _pad(rng)},
                }
            )
        )
    out.append(dumps({"op": "lwn", "scn": scn + 5}))
    (inp / "redo_1_1.jsonl").write_bytes(b"".join(out))


def _add_commit(inp: Path) -> None:
    (inp / "redo_1_2.jsonl").write_bytes(
        dumps({"op": "commit", "scn": 10_000, "xid": "X", "tm": 1})
        + dumps({"op": "begin", "scn": 10_001, "xid": "Z"})
        + dumps(
            {"op": "insert", "scn": 10_002, "xid": "Z", "owner": "APP", "table": "T", "rid": "z", "after": {"A": 1}}
        )
        + dumps({"op": "commit", "scn": 10_003, "xid": "Z", "tm": 2})
    )


def _blocks_of(seg: Path, xid: str) -> list[tuple[int, bytes]]:
    """(first index, stored value) of the blocks of segment ``seg`` holding records of ``xid``."""
    env = lmdb.open(str(seg), subdir=False, readonly=True, lock=False, max_dbs=2)
    try:
        db = env.open_db(b"blocks", create=False)
        out = []
        with env.begin(db=db) as txn:
            for key, value in txn.cursor():
                first = key_index(key)
                block = thread_codec().decode(first, value)
                if any(g[0] == xid for g in read_summary(block.record(0)).groups):
                    out.append((first, bytes(value)))
        return out
    finally:
        env.close()


@pytest.mark.parametrize("where", ["payload", "header"])
def test_damaged_queue_block_stops_the_run_without_wrong_rows(tmp_path: Path, where: str) -> None:
    inp, q, cf = tmp_path / "input", tmp_path / "queue", tmp_path / "cf"
    _corruption_input(inp)
    args = ("--segment-size", "64KiB", "--block-records", "50")
    first = ok(replay(inp, q, cf, *args, "--json")).json()
    assert first["open_transactions"] == 1 and first["transactions_published"] == 40, first
    segs = sorted((q / "segments").glob("seg-*.mdb"))
    assert len(segs) >= 3, segs  # X's segments are kept
    # a block of X in a segment that is not the newest one
    candidates = [(seg, first_index, value) for seg in segs[:-1] for first_index, value in _blocks_of(seg, "X")]
    assert len(candidates) >= 2, candidates
    seg, index, value = candidates[len(candidates) // 2]
    backup = seg.read_bytes()
    at = backup.find(value)
    assert at > 0 and backup.find(value, at + 1) < 0
    damaged = bytearray(backup)
    if where == "payload":
        off = at + HEADER_SIZE + (len(value) - HEADER_SIZE) // 2
        damaged[off] ^= 0x5A
        reason = "checksum mismatch"
    else:
        damaged[at] ^= 0x07  # the format version byte
        reason = "unknown format version"
    seg.write_bytes(bytes(damaged))
    before = part_bytes(cf)
    _add_commit(inp)
    model = expected_changefeed(inp)
    assert [r["xid"] for r in model.rows[-601:]] == ["X"] * 600 + ["Z"]

    failed = replay(inp, q, cf, *args)
    line = one_line_error(failed, f"queue block {index} ", str(seg), reason)
    assert part_bytes(cf) == before, "rows were published past the damaged block"
    no_tmp_files(cf)
    assert published_prefix(cf, model) == 40
    # the same command again: the same error, still nothing published
    one_line_error(replay(inp, q, cf, *args), f"queue block {index} ", reason)
    assert part_bytes(cf) == before
    # the segment restored from a backup: the run completes, exactly
    seg.write_bytes(backup)
    ok(replay(inp, q, cf, *args))
    exact(cf, model)
    assert line
