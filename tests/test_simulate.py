"""Tests of the RAC workload generator `olr_buffer.simulate`."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import pytest
import zstandard

from olr_buffer.simulate import SimulationStats, simulate
from tests.contract_model import InputRecord, ModelResult, expected_changefeed, load_input

NAME_RE = re.compile(r"^redo_([0-9]+)_([0-9]+)\.jsonl(\.zst)?$")
XID_RE = re.compile(r"^0x[0-9a-f]{4}\.[0-9a-f]{3}\.[0-9a-f]{8}$")
RID_RE = re.compile(r"^[A-Za-z0-9+/]{18}$")
OPS = {"begin", "insert", "update", "delete", "ddl", "commit", "rollback", "lwn"}
LARGE_ROWS = 700


class Workload:
    """A simulated input directory with its records and its model changefeed."""

    def __init__(self, directory: Path, stats: SimulationStats) -> None:
        self.dir = directory
        self.stats = stats
        self.records: list[InputRecord] = load_input(directory)
        self.model: ModelResult = expected_changefeed(directory)
        self.by_xid: dict[str, list[InputRecord]] = collections.defaultdict(list)
        for rec in self.records:
            if rec.op != "lwn":
                self.by_xid[rec.data["xid"]].append(rec)
        self.emitted_xids = {row["xid"] for row in self.model.rows}


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    directory = tmp_path_factory.mktemp("sim")
    stats = simulate(
        directory, threads=3, transactions=400, seed=7, records_per_file=300, large_tx_rows=LARGE_ROWS, open_at_end=2
    )
    return Workload(directory, stats)


def read_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def decoded_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if path.name.endswith(".zst"):
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            data = reader.read()
    assert data.endswith(b"\n"), f"{path.name}: last line not ended by newline"
    return data[:-1].split(b"\n")


# ---------------------------------------------------------------------------------------
# Files


def test_same_seed_gives_byte_identical_files(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = dict(threads=2, transactions=150, records_per_file=200, large_tx_rows=100)
    first = simulate(tmp_path / "a", seed=11, **kwargs)
    second = simulate(tmp_path / "b", seed=11, **kwargs)
    other = simulate(tmp_path / "c", seed=12, **kwargs)
    assert first == second
    files_a, files_b = read_files(tmp_path / "a"), read_files(tmp_path / "b")
    assert files_a == files_b
    assert read_files(tmp_path / "c") != files_a
    assert other.records > 0


def test_sequences_are_contiguous_and_archived_ones_compressed(workload: Workload) -> None:
    names = sorted(path.name for path in workload.dir.iterdir())
    by_thread: dict[int, dict[int, bool]] = collections.defaultdict(dict)
    for name in names:
        match = NAME_RE.match(name)
        assert match, f"unexpected file {name}"
        by_thread[int(match.group(1))][int(match.group(2))] = bool(match.group(3))
    assert sorted(by_thread) == [1, 2, 3]
    for thread, sequences in by_thread.items():
        last = max(sequences)
        assert sorted(sequences) == list(range(1, last + 1)), f"thread {thread}"
        assert last >= 3, f"thread {thread} should switch logs several times"
        for sequence, compressed in sequences.items():
            assert compressed == (sequence != last), f"redo_{thread}_{sequence}"
    assert workload.stats.files == len(names)


def test_log_switch_every_records_per_file(workload: Workload) -> None:
    for path in workload.dir.iterdir():
        lines = decoded_lines(path)
        if path.name.endswith(".zst"):
            assert len(lines) == 300, path.name
        else:
            assert 1 <= len(lines) <= 300, path.name


def test_uncompressed_output_when_asked(tmp_path: Path) -> None:
    simulate(tmp_path, threads=2, transactions=100, records_per_file=100, compress_archived=False)
    names = [path.name for path in tmp_path.iterdir()]
    assert len(names) > 2
    assert all(name.endswith(".jsonl") for name in names)


def test_refuses_a_directory_with_redo_files_unless_overwrite(tmp_path: Path) -> None:
    simulate(tmp_path, threads=2, transactions=30)
    with pytest.raises(FileExistsError):
        simulate(tmp_path, threads=2, transactions=30)
    stats = simulate(tmp_path, threads=1, transactions=30, overwrite=True)
    names = {path.name for path in tmp_path.iterdir()}
    assert names == {"redo_1_1.jsonl"}
    assert stats.files == 1


# ---------------------------------------------------------------------------------------
# Records


def check_record(data: dict[str, Any]) -> None:
    """The field rules of contract section 1 for one record."""
    op = data["op"]
    assert op in OPS
    assert type(data["scn"]) is int and 0 <= data["scn"] < 2**63
    assert type(data.get("sub", 0)) is int and data.get("sub", 0) >= 0
    assert "sub" not in data or data["sub"] > 0, "sub is omitted when 0"
    assert type(data["tm"]) is int
    if op == "lwn":
        assert set(data) <= {"op", "scn", "sub", "tm"}
        return
    assert XID_RE.match(data["xid"]), data["xid"]
    if op in ("insert", "update", "delete"):
        assert isinstance(data["owner"], str) and isinstance(data["table"], str)
        assert type(data["obj"]) is int
        assert RID_RE.match(data["rid"]), data["rid"]
        assert ("before" in data) == (op != "insert")
        assert ("after" in data) == (op != "delete")
        for image in ("before", "after"):
            if image in data:
                assert isinstance(data[image], dict) and len(data[image]) >= 4
        assert data.get("rollback", False) in (True, False)
    elif op == "ddl":
        assert isinstance(data["owner"], str) and isinstance(data["table"], str)
        assert isinstance(data["sql"], str) and data["sql"]


def test_every_line_parses_and_has_the_required_fields(workload: Workload) -> None:
    count = 0
    for path in sorted(workload.dir.iterdir()):
        for number, line in enumerate(decoded_lines(path), start=1):
            text = line.decode("utf-8")
            try:
                check_record(json.loads(text))
            except (AssertionError, KeyError) as exc:
                raise AssertionError(f"{path.name}:{number}: {exc!r}: {text[:200]}") from exc
            count += 1
    assert count == workload.stats.records == len(workload.records)


def test_values_are_realistic(workload: Workload) -> None:
    raw = b"".join(b"".join(decoded_lines(path)) for path in workload.dir.iterdir())
    assert not raw.isascii(), "non-ASCII text is written as UTF-8, not escaped"
    kinds: set[type] = set()
    non_ascii = False
    for rec in workload.records:
        for image in ("before", "after"):
            for value in rec.data.get(image, {}).values():
                kinds.add(type(value))
                non_ascii = non_ascii or (isinstance(value, str) and not value.isascii())
    assert {str, int, float, type(None)} <= kinds
    assert non_ascii


def test_scn_and_sub_never_decrease_within_a_thread(workload: Workload) -> None:
    last: dict[int, tuple[int, int]] = {}
    for rec in workload.records:  # in (thread, sequence, line) order
        key = (rec.scn, rec.data.get("sub", 0))
        assert key >= last.get(rec.thread, (-1, 0)), f"thread {rec.thread} goes back at {rec}"
        if key[0] == last.get(rec.thread, (-1, 0))[0]:
            assert key[1] == last[rec.thread][1] + 1, "sub counts records sharing an SCN"
        last[rec.thread] = key


def test_lwn_promise_holds(workload: Workload) -> None:
    """After ``lwn N`` a thread writes no record with scn <= N."""
    floor: dict[int, int] = {}
    for rec in workload.records:
        assert rec.scn > floor.get(rec.thread, -1), f"record at or below an earlier lwn: {rec}"
        if rec.op == "lwn":
            floor[rec.thread] = rec.scn


def test_transactions_are_well_formed(workload: Workload) -> None:
    """At most one begin and one end; nothing before the begin or after the end;
    begin and end on one thread."""
    for xid, recs in workload.by_xid.items():
        begins = [rec for rec in recs if rec.op == "begin"]
        ends = [rec for rec in recs if rec.op in ("commit", "rollback")]
        assert len(begins) <= 1 and len(ends) <= 1, xid
        if begins:
            assert all(rec.row_key >= begins[0].row_key for rec in recs), xid
        if ends:
            assert all(rec.scn <= ends[0].scn for rec in recs), xid
            if begins:
                assert begins[0].thread == ends[0].thread, xid


def test_updates_and_deletes_follow_the_snapshot(workload: Workload) -> None:
    """Applying the changefeed in order: every before image is the current row."""
    tables: dict[tuple[str, str], dict[str, Any]] = collections.defaultdict(dict)
    for row in workload.model.rows:
        if row["op"] == "ddl":
            continue
        table = tables[(row["owner"], row["table"])]
        where = f"tx_seq={row['tx_seq']} op_seq={row['op_seq']} rid={row['rid']}"
        if row["op"] == "c":
            assert row["rid"] not in table, where
            table[row["rid"]] = row["after"]
            continue
        assert table.get(row["rid"]) == row["before"], where
        if row["op"] == "u":
            table[row["rid"]] = row["after"]
        else:
            del table[row["rid"]]
    assert sum(len(table) for table in tables.values()) > 0


# ---------------------------------------------------------------------------------------
# Features of the workload


def test_stats_agree_with_the_model(workload: Workload) -> None:
    stats, model = workload.stats, workload.model
    assert model.committed == stats.emitted
    assert len(model.rows) == stats.emitted_rows
    assert model.rolled_back == stats.rolled_back
    assert model.no_begin == stats.no_begin == 3
    assert model.empty == stats.fully_compensated
    assert model.open == stats.open_at_end == 2
    assert model.unmatched_compensations == 0
    assert model.transactions == stats.transactions == len(workload.by_xid)
    assert stats.committed == model.committed + model.no_begin + model.empty
    ops = collections.Counter(rec.op for rec in workload.records)
    assert ops["lwn"] == stats.lwn and ops["ddl"] == stats.ddl
    compensations = sum(1 for rec in workload.records if rec.data.get("rollback") is True)
    assert compensations == stats.compensations


def test_workload_has_every_feature(workload: Workload) -> None:
    model, by_xid, emitted = workload.model, workload.by_xid, workload.emitted_xids
    assert model.committed > 100 and model.rolled_back > 0 and model.empty > 0
    # Partial rollback: an emitted transaction with compensation records.
    assert any(any(rec.data.get("rollback") for rec in by_xid[xid]) for xid in emitted), "no partial rollback"
    # Distributed: an emitted transaction with rows on two threads.
    threads_of = {xid: {rec.thread for rec in by_xid[xid]} for xid in emitted}
    assert any(len(threads) > 1 for threads in threads_of.values()), "no distributed transaction"
    # Equal commit SCNs on different threads, both emitted.
    commits = collections.defaultdict(set)
    for rec in workload.records:
        if rec.op == "commit" and rec.data["xid"] in emitted:
            commits[rec.scn].add(rec.thread)
    assert any(len(threads) > 1 for threads in commits.values()), "no equal commit SCNs"
    # DDL rows, lwn on every thread.
    assert any(row["op"] == "ddl" for row in model.rows)
    assert {rec.thread for rec in workload.records if rec.op == "lwn"} == {1, 2, 3}
    # Transactions without begin come first.
    no_begin = [xid for xid, recs in by_xid.items() if not any(r.op == "begin" for r in recs)]
    assert len(no_begin) == 3
    first_begin = min(rec.scn for rec in workload.records if rec.op == "begin")
    assert all(min(rec.scn for rec in by_xid[xid]) <= first_begin for xid in no_begin)


def test_workload_has_long_large_and_idle_parts(workload: Workload) -> None:
    rows_per_xid = collections.Counter(row["xid"] for row in workload.model.rows)
    assert max(rows_per_xid.values()) >= LARGE_ROWS, "no large transaction"
    assert sum(count >= 200 for count in rows_per_xid.values()) >= 2
    spans = [len({(rec.thread, rec.sequence) for rec in recs}) for recs in workload.by_xid.values()]
    assert max(spans) >= 4, "no transaction open across several log switches"
    assert idle_stretch(workload.records) >= 100, "no thread idle while the others work"


def idle_stretch(records: list[InputRecord]) -> int:
    """The most non-lwn records that other threads write while one thread writes a run of
    at least five lwn records and nothing else."""
    best = 0
    for thread in {rec.thread for rec in records}:
        own = [rec for rec in records if rec.thread == thread]
        start = 0
        while start < len(own):
            end = start
            while end < len(own) and own[end].op == "lwn":
                end += 1
            if end - start >= 5:
                low, high = own[start].scn, own[end - 1].scn
                busy = sum(1 for rec in records if rec.thread != thread and rec.op != "lwn" and low <= rec.scn <= high)
                best = max(best, busy)
            start = end + 1
    return best


@pytest.mark.parametrize(
    ("threads", "seed", "records_per_file"), [(1, 0, 50), (2, 1, 120), (4, 2, 400), (5, 3, 10_000)]
)
def test_other_shapes_keep_the_rules(tmp_path: Path, threads: int, seed: int, records_per_file: int) -> None:
    stats = simulate(
        tmp_path,
        threads=threads,
        transactions=120,
        seed=seed,
        records_per_file=records_per_file,
        concurrency=5,
        lwn_every=10.0,
    )
    work = Workload(tmp_path, stats)
    test_scn_and_sub_never_decrease_within_a_thread(work)
    test_lwn_promise_holds(work)
    test_transactions_are_well_formed(work)
    test_updates_and_deletes_follow_the_snapshot(work)
    assert work.model.committed == stats.emitted
    assert work.model.no_begin == stats.no_begin
    assert work.model.unmatched_compensations == 0
    assert {rec.thread for rec in work.records} == set(range(1, threads + 1))


def test_rolling_restarts_close_each_thread_in_turn(tmp_path: Path) -> None:
    from tests.contract_model import check_close_rule

    stats = simulate(
        tmp_path / "w",
        threads=3,
        transactions=400,
        seed=9,
        records_per_file=200,
        rolling_restarts=True,
        close_thread_at=0.9,
    )
    records = load_input(tmp_path / "w")
    assert (stats.closes, stats.reopens) == (4, 3)
    for t in (1, 2, 3):
        ops = [r.op for r in records if r.thread == t]
        first = ops.index("close")
        assert ops[first + 1] == "lwn"  # closed: nothing until the lwn that opens it again
    assert [r.op for r in records if r.thread == 3][-1] == "close"  # closed for the rest of the input
    # records in write order (the global clock): each reopening is above every SCN before it
    check_close_rule(sorted(records, key=lambda r: (r.scn, r.data.get("sub", 0))))
