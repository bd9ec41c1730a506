"""``olr-buffer replay olr+file://OUTPUT``: OpenLogReplicator's file-writer output replayed
through the command line into a changefeed, read back with pyarrow; the same changefeed
as the OpenLogReplicator source's contract (section 7) gives for the same messages;
exactly once across kills; bad lines ``FILE:LINE: reason`` (exit 3) or set aside."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from olr_buffer.runtime import PipelineOptions, replay
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, load_changefeed
from tests.paths import ROOT
from tests.sources.olr.service import service, wait_transactions
from tests.sources.olr.standin import StandIn
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload
from tests.sources.olr_file.fixtures import (
    ISSUE_126,
    ISSUE_126_AFTER,
    LATER,
    MANUAL_CHECKPOINT,
    SCHEMALESS,
    write_output,
)

pytestmark = pytest.mark.e2e


def cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def replay_args(tmp: Path, output: str, *extra: str) -> list[str]:
    return [
        "replay",
        f"olr+file://{output}",
        "--queue",
        str(tmp / "q"),
        "--changefeed",
        str(tmp / "cf"),
        "--no-progress",
        *extra,
    ]


def rows(cf: Path) -> list[dict]:
    """The changefeed as pyarrow reads it, in (tx_seq, op_seq) order, JSON text unparsed."""
    out = []
    for path in sorted(cf.glob("part-*.parquet")):
        out.extend(pq.read_table(path).to_pylist())
    return sorted(out, key=lambda r: (r["tx_seq"], r["op_seq"]))


def test_real_openlogreplicator_output_replays_into_the_changefeed(tmp_path):
    out = tmp_path / "olr"
    write_output(out, ISSUE_126 + [MANUAL_CHECKPOINT] + LATER, files=2, name="ORCL-%i.json")
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 0, done.stderr
    assert "published 2 transactions (3 rows)" in done.stdout
    got = rows(tmp_path / "cf")
    assert [(r["tx_seq"], r["op_seq"], r["c_scn"], r["xid"], r["op"], r["thread"]) for r in got] == [
        (0, 0, 358141, "0x0005.00d.00000191", "c", 1),
        (1, 0, 358166, "0x0005.00e.00000192", "u", 1),
        (1, 1, 358166, "0x0005.00e.00000192", "d", 1),
    ]
    first = got[0]
    # the row's scn and tm: the transaction's first message's (the only one with them)
    assert (first["scn"], first["tm"], first["c_tm"]) == (358135, None, 1712602205000000000)
    assert (first["owner"], first["table"], first["obj"], first["rid"]) == ("TESTUSR1", "T2", 20060, None)
    assert first["after"] == ISSUE_126_AFTER and first["before"] is None  # the message's own JSON text
    assert json.loads(got[1]["before"]) == {"ID": 3, "DATA": "x"} and got[2]["after"] is None
    check_changefeed_layout(tmp_path / "cf")
    again = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert again.returncode == 0, again.stderr
    assert "published 0 transactions" in again.stdout
    assert rows(tmp_path / "cf") == got
    status = cli("status", "--queue", str(tmp_path / "q"), "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)["olr_file"]
    assert (doc["file"], doc["line"], doc["last_commit"]) == ("ORCL-1.json", 5, {"c_scn": 358166, "c_idx": 3})
    assert (doc["transactions"], doc["checkpoint_messages"]) == (2, 1)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_gives_what_the_olr_source_gives(tmp_path, form):
    """The messages of each of OpenLogReplicator's JSON forms, in rotated files, give the
    changefeed the OpenLogReplicator source's model gives for the same messages (the model
    ``tests/sources/olr`` holds ``run olr://`` to): c_scn, xid as text, thread from rth."""
    f = FORMS[form]
    txs = workload(random.Random(hash(form) & 0xFFFF), 40, rac="rth" in form or "xidn" in form)
    write_output(tmp_path / "olr", messages(txs, f), files=3, name="OLR-%3i.json")
    replay(
        f"olr+file://{tmp_path}/olr/OLR-%3i.json",
        str(tmp_path / "q"),
        str(tmp_path / "cf"),
        PipelineOptions(durable=False, block_records=7, file_rows=50),
    )
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_rows(txs, f))
    check_changefeed_layout(tmp_path / "cf")


@pytest.mark.parametrize("form", ["per-row-all", "per-transaction", "rth-tms"])
def test_the_same_messages_give_the_same_changefeed_as_run_olr(tmp_path, form):
    """The same messages sent by an OpenLogReplicator stand-in to ``run olr://`` and
    written to files for ``replay olr+file://``: every column of every row the same (the
    schema versions too, from the tables' ``schema.columns``), and the same schema
    documents."""
    f = FORMS[form]
    txs = workload(random.Random(21), 30, rac=True)
    msgs = messages(txs, f)
    with StandIn(msgs) as sender, service(sender.uri, tmp_path / "net") as box:
        wait_transactions(tmp_path / "net" / "cf", len(txs), box=box)
    write_output(tmp_path / "olr", msgs, files=2, name="OLR-%i.json")
    replay(
        f"olr+file://{tmp_path}/olr/OLR-%i.json",
        str(tmp_path / "file" / "q"),
        str(tmp_path / "file" / "cf"),
        PipelineOptions(durable=False, block_records=5),
    )
    net, file = rows(tmp_path / "net" / "cf"), rows(tmp_path / "file" / "cf")
    assert len(net) == len(file) == sum(len(tx.rows) for tx in txs)
    assert file == net
    if f.columns:
        assert {r["schema_version"] for r in file} - {None}
    schemas = "_olr_buffer/schemas"
    assert {p.name: p.read_bytes() for p in (tmp_path / "file" / "cf" / schemas).iterdir()} == {
        p.name: p.read_bytes() for p in (tmp_path / "net" / "cf" / schemas).iterdir()
    }


@pytest.mark.slow
def test_killed_replays_then_a_last_one_publish_every_transaction_once(tmp_path):
    """SIGKILL at appends (inside a message of a whole transaction too: 4 records a block),
    at a row group, at a publication and before a checkpoint; then a replay that runs to
    its end: the changefeed is the whole output, once."""
    f = FORMS["per-transaction"]
    txs = workload(random.Random(7), 60, large=40, rac=True)
    msgs = messages(txs, f)
    rth = [m.replace(b'"c_scn"', b'"rth":2,"c_scn"', 1) if i % 3 == 0 else m for i, m in enumerate(msgs)]
    write_output(tmp_path / "olr", rth, files=4, name="OLR-%i.json")
    args = replay_args(tmp_path, f"{tmp_path}/olr/OLR-%i.json", "--block-records", "4", "--file-rows", "25")
    kills = [
        "after_append:3",
        "after_append:17",
        "after_row_group:1",
        "after_append:29",
        "after_rename:1",
        "after_append:8",
        "before_checkpoint:1",
        "after_append:51",
    ]
    killed = 0
    for fault in kills:
        done = cli(*args, env=dict(os.environ, OLR_BUFFER_FAULT=fault))
        if done.returncode == 0:
            break
        assert done.returncode == -9, done.stderr
        killed += 1
    assert killed >= 5
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    want = expected_rows(txs, f)
    threads = {}
    for i, m in enumerate(msgs):  # the transactions whose message got an rth: their rows are in thread 2
        if i % 3 == 0:
            threads[json.loads(m).get("xid")] = 2
    for r in want:
        r["thread"] = threads.get(r["xid"], 1)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), want)
    check_changefeed_layout(tmp_path / "cf")


def test_a_bad_line_stops_with_file_and_line_and_the_fixed_output_resumes(tmp_path):
    f = FORMS["per-row"]
    txs = workload(random.Random(3), 12)
    msgs = messages(txs, f)
    paths = write_output(tmp_path / "olr", msgs, files=2, name="OLR-%i.json")
    lines = paths[1].read_bytes().splitlines(keepends=True)
    good = lines[4]
    lines[4] = good[: len(good) // 2] + b"\n"  # cut short
    paths[1].write_bytes(b"".join(lines))
    args = replay_args(tmp_path, f"{tmp_path}/olr/OLR-%i.json")
    done = cli(*args)
    assert done.returncode == 3, done.stderr
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"olr-buffer: error: {paths[1]}:5: not valid JSON"), done.stderr
    assert "Traceback" not in done.stderr
    before = load_changefeed(tmp_path / "cf")
    assert before and before == load_changefeed(tmp_path / "cf")
    lines[4] = good
    paths[1].write_bytes(b"".join(lines))
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_rows(txs, f))


def test_dead_letter_sets_bad_lines_aside_and_names_them(tmp_path):
    out = tmp_path / "olr"
    broken = LATER[1].replace(b'"before":{', b'"before":[', 1)  # a before image that is not an object
    write_output(out, ISSUE_126 + [b"not json at all"] + LATER[:1] + [broken] + LATER[2:], name="ORCL-%i.json")
    dead = tmp_path / "dead.jsonl"
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json", "--dead-letter", str(dead)))
    assert done.returncode == 0, done.stderr
    path = out / "ORCL-0.json"
    assert f"{path}:4: not valid JSON" in done.stdout and f"{path}:6: " in done.stdout
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["file"], d["line"]) for d in letters] == [(str(path), 4), (str(path), 6)]
    assert letters[0]["raw"] == "not json at all\n"
    got = rows(tmp_path / "cf")
    assert [(r["c_scn"], r["op"]) for r in got] == [(358141, "c"), (358166, "d")]


def test_positions_that_go_back_are_refused(tmp_path):
    out = tmp_path / "olr"
    # the first transaction written twice, as after OpenLogReplicator restarted from an
    # earlier checkpoint: its position goes back
    write_output(out, ISSUE_126 + LATER + ISSUE_126, name="ORCL-%i.json")
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 3, done.stderr
    assert f"{out}/ORCL-0.json:8: the position (c_scn 358141 c_idx 0) does not follow" in done.stderr
    assert [r["c_scn"] for r in rows(tmp_path / "cf")] == [358141, 358166, 358166]


def test_messages_without_line_breaks_are_named(tmp_path):
    out = tmp_path / "olr"
    out.mkdir()
    (out / "ORCL-0.json").write_bytes(b"".join(ISSUE_126))  # "new-line": 0
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 3, done.stderr
    assert f"{out}/ORCL-0.json:1: " in done.stderr and '"new-line": 1' in done.stderr


def test_no_file_of_the_output_is_bad_input_and_leaves_nothing(tmp_path):
    done = cli(*replay_args(tmp_path, f"{tmp_path}/olr/ORCL-%i.json"))
    assert done.returncode == 3, done.stderr
    assert "no file of OpenLogReplicator's output" in done.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()


def test_a_file_cut_short_and_another_output_are_refused_in_one_line(tmp_path):
    out = tmp_path / "olr"
    [path] = write_output(out, ISSUE_126 + LATER, name="ORCL-%i.json")
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 0, done.stderr
    path.write_bytes(b"".join(m + b"\n" for m in ISSUE_126))  # replaced by a shorter one
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 3, done.stderr
    assert f"{path}:8: the file holds" in done.stderr and "cut short or replaced" in done.stderr
    write_output(tmp_path / "other", ISSUE_126, name="X-%i.json")
    done = cli(*replay_args(tmp_path, f"{tmp_path}/other/X-%i.json"))
    assert done.returncode == 2, done.stderr
    assert f"this queue was filled from olr+file://{out}/ORCL-%i.json" in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1


def test_rows_without_an_owner_are_published_with_an_empty_owner(tmp_path):
    """OpenLogReplicator's schemaless rows (its manual's example) name no owner: published
    with owner '' (the changefeed's owner is never null), as the olr source publishes them;
    a ddl that has its sql alone, with owner and table ''."""
    out = tmp_path / "olr"
    ddl = (
        b'{"scn":358180,"tm":1712602225000000000,"c_scn":358181,"c_idx":0,"xid":"0x0006.002.00000194",'
        b'"payload":[{"op":"ddl","sql":"create table t (a number)"}]}'
    )
    write_output(out, ISSUE_126 + SCHEMALESS + [ddl], name="ORCL-%i.json")
    done = cli(*replay_args(tmp_path, f"{out}/ORCL-%i.json"))
    assert done.returncode == 0, done.stderr
    got = rows(tmp_path / "cf")
    assert [(r["c_scn"], r["op"], r["owner"], r["table"]) for r in got] == [
        (358141, "c", "TESTUSR1", "T2"),
        (358171, "c", "", "OBJ_87705"),
        (358181, "ddl", "", ""),
    ]
    assert got[1]["after"] == '{"COL_0":"53544f50","COL_1":"787708010d2339"}' and got[1]["obj"] is None
    assert got[2]["sql"] == "create table t (a number)"
