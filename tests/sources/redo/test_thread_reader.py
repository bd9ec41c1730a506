"""Reader threads on real files: positions, resume, sequences, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from olr_buffer.changes import decode_record, read_summary
from olr_buffer.sources.redo.errors import InputError, MissingSequenceError
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.position import load_positions
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.txbuffer import LmdbQueue


def lines(n: int, start_scn: int, xid: str = "x") -> list[dict]:
    out = [{"op": "begin", "scn": start_scn, "xid": xid}]
    for i in range(n):
        out.append(
            {
                "op": "insert",
                "scn": start_scn + 1 + i,
                "xid": xid,
                "owner": "O",
                "table": "T",
                "rid": f"r{i}",
                "after": {"i": i},
            }
        )
    return out


def write(path: Path, recs: list[dict], compress: bool = False, raw_tail: bytes = b"") -> None:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in recs) + raw_tail
    if compress:
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)


def records_in(queue: LmdbQueue) -> list[list]:
    out = []
    for i, rec in queue.tailer():
        block = queue.read_block(i)
        if i == block.first:
            continue  # the summary
        out.append(decode_record(rec))
    return out


def reader_for(queue, root: Path, thread: int = 1, **kw) -> ThreadReader:
    files = scan(str(root)).get(thread, {})
    pos = load_positions(queue.meta_items()).get(thread)
    return ThreadReader(queue, str(root), thread, files, pos, **kw)


def test_reads_plain_and_zstd_sequences_with_positions(tmp_path: Path):
    inp = tmp_path / "in"
    inp.mkdir()
    write(inp / "redo_1_1.jsonl.zst", lines(10, 100), compress=True)
    write(inp / "redo_1_2.jsonl", lines(5, 200, "y"))
    with LmdbQueue(tmp_path / "q") as q:
        reader_for(q, inp, block_records=4).read_to_end()
        recs = records_in(q)
        assert len(recs) == 17
        assert [(r[3], r[4]) for r in recs if r[0] == 1] == [(1, 1), (2, 1)]  # begins: (sequence, line)
        pos = load_positions(q.meta_items())[1]
        assert (pos.sequence, pos.line, pos.finished) == (2, 6, True)
        last = q.read_block(q.next_index - 1)
        assert read_summary(last.record(0)).progress == 204  # the real progress, not "complete"


def test_resume_after_bad_line_loses_and_repeats_nothing(tmp_path: Path):
    inp = tmp_path / "in"
    inp.mkdir()
    good = lines(8, 100)
    write(inp / "redo_1_1.jsonl", good[:5] + [{"op": "insert", "scn": "bad"}] + good[5:])
    with LmdbQueue(tmp_path / "q") as q:
        with pytest.raises(InputError) as info:
            reader_for(q, inp, block_records=2).read_to_end()
        assert str(info.value).startswith(f"{inp / 'redo_1_1.jsonl'}:6: field 'scn' must be an integer")
        assert [r[4] for r in records_in(q)] == [1, 2, 3, 4, 5]
    write(inp / "redo_1_1.jsonl", good)  # fixed: the bad line removed
    with LmdbQueue(tmp_path / "q") as q:
        reader_for(q, inp, block_records=2).read_to_end()
        assert [r[4] for r in records_in(q)] == list(range(1, 10))


def test_scn_going_back_across_sequences_is_an_error(tmp_path: Path):
    inp = tmp_path / "in"
    inp.mkdir()
    write(inp / "redo_1_1.jsonl", lines(3, 100))
    write(inp / "redo_1_2.jsonl", lines(3, 50, "y"))
    with LmdbQueue(tmp_path / "q") as q:
        with pytest.raises(
            InputError, match=r"redo_1_2.jsonl:1: SCN goes back: \(scn 50, sub 0\) after \(scn 103, sub 0\)"
        ):
            reader_for(q, inp).read_to_end()


def test_missing_sequence_names_thread_and_number(tmp_path: Path):
    inp = tmp_path / "in"
    inp.mkdir()
    write(inp / "redo_3_4.jsonl", lines(1, 1))
    write(inp / "redo_3_6.jsonl", lines(1, 9, "y"))
    with LmdbQueue(tmp_path / "q") as q:
        with pytest.raises(MissingSequenceError, match="thread 3 is missing sequence 5"):
            reader_for(q, inp, thread=3).read_to_end()


def test_lwn_moves_progress_and_may_repeat_the_last_scn(tmp_path: Path):
    inp = tmp_path / "in"
    inp.mkdir()
    write(
        inp / "redo_1_1.jsonl",
        [{"op": "begin", "scn": 10, "sub": 3, "xid": "x"}, {"op": "lwn", "scn": 10}, {"op": "lwn", "scn": 40}],
    )
    with LmdbQueue(tmp_path / "q") as q:
        r = reader_for(q, inp)
        r._read_file(next(iter(r.files.values())), final=True)
        r._flush()
        assert read_summary(q.read_block(0).record(0)).progress == 40


@pytest.mark.parametrize("marker", ["lwn", "close"])
@pytest.mark.parametrize("sub", [0, 7])
def test_a_record_at_the_scn_of_an_lwn_or_close_before_it_is_bad_input(tmp_path: Path, marker: str, sub: int):
    """``lwn N`` (and ``close N``) says every record of the thread at or below N is
    written: a record at N after it breaks the promise, whatever its sub. A record above N,
    and another marker at N, are fine. (The chunked loop leaves the line to the line path,
    which words the error: both paths run.)"""
    inp = tmp_path / "in"
    inp.mkdir()
    head = [{"op": "begin", "scn": 10, "sub": 3, "xid": "x"}, {"op": marker, "scn": 20}, {"op": marker, "scn": 20}]
    write(
        inp / "redo_1_1.jsonl",
        head
        + [
            {
                "op": "insert",
                "scn": 20,
                "sub": sub,
                "xid": "x",
                "owner": "O",
                "table": "T",
                "rid": "r",
                "after": {"ID": 1},
            }
        ],
    )
    with LmdbQueue(tmp_path / "q") as q:
        with pytest.raises(InputError) as err:
            reader_for(q, inp).read_to_end()
    assert str(err.value).startswith(
        f"{inp / 'redo_1_1.jsonl'}:4: record at scn 20 after an lwn or close at scn 20 (they say every record "
        "of the thread at or below their scn is written)"
    ), str(err.value)
    write(inp / "redo_1_1.jsonl", head + [{"op": "commit", "scn": 21, "xid": "x"}])
    with LmdbQueue(tmp_path / "q2") as q:
        reader_for(q, inp).read_to_end()
        assert [(r[1], r[2], r[4]) for r in records_in(q)] == [(10, 3, 1), (21, 0, 4)]  # (scn, sub, line)
