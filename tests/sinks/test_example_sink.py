"""The worked example of docs/architecture.md, "Adding a sink": docs/examples/jsonl_sink.py,
a sink written from the Sink contract alone, added to the sink table (``KINDS``) and chosen
by ``PipelineOptions(sink="jsonl")``; the runtime's ``replay`` runs through it, also killed
(SIGKILL at a fault point, in a subprocess) and run again: every committed transaction is
there once, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks import KINDS, Sink, TransactionSink
from tests.contract_model import expected_changefeed

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
sys.path.insert(0, str(EXAMPLES))
import jsonl_sink  # noqa: E402  (docs/examples is not a package)

FIELDS = ("tx_seq", "op_seq", "xid", "c_scn", "op", "scn", "thread", "owner", "table", "before", "after")

#: a replay through the example sink, in a process of its own (killed by OLR_BUFFER_FAULT)
REPLAY = (
    f"import sys; sys.path.insert(0, {str(EXAMPLES)!r}); import jsonl_sink; "
    "from olr_buffer.sinks import KINDS; KINDS['jsonl'] = jsonl_sink.KIND; "
    "from olr_buffer.runtime import PipelineOptions, replay; "
    "replay(*sys.argv[1:4], PipelineOptions(sink='jsonl', file_rows=40, checkpoint_seconds=float(sys.argv[4])))"
)


@pytest.fixture
def jsonl_kind(monkeypatch):
    """The example in the sink table, as one line in ``KINDS`` would add it."""
    monkeypatch.setitem(KINDS, "jsonl", jsonl_sink.KIND)


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("in")
    simulate(out, threads=3, transactions=200, seed=11, records_per_file=150, compress_archived=False)
    return out


def published(cf: Path) -> list[dict]:
    """Every line of every batch file, in file order, ``before``/``after`` parsed."""
    rows = []
    for name in sorted(n for n in os.listdir(cf) if n.startswith("batch-")):
        for line in (cf / name).read_text().splitlines():
            row = json.loads(line)
            rows.append({k: json.loads(row[k]) if k in ("before", "after") and row[k] else row[k] for k in FIELDS})
    return rows


def expected(input_dir: Path) -> list[dict]:
    return [{k: r[k] for k in FIELDS} for r in expected_changefeed(input_dir).rows]


def test_the_example_implements_the_contract():
    """Its members are the contract's: those of the class, and three set on the instance."""
    members = {
        n for proto in (Sink, TransactionSink) for n in (*vars(proto), *proto.__annotations__) if not n.startswith("_")
    }
    own = {n for n in vars(jsonl_sink.JsonlSink) if not n.startswith("_")}
    assert own == members - {"path", "last_commit", "next_tx_seq"}


def test_replay_through_the_example_sink_then_again_adds_nothing(jsonl_kind, workload: Path, tmp_path: Path):
    q, cf = tmp_path / "q", tmp_path / "cf"
    summary = replay(str(workload), str(q), str(cf), PipelineOptions(sink="jsonl", file_rows=40, durable=False))
    want = expected(workload)
    assert published(cf) == want  # every committed transaction once, in commit order
    assert summary.transactions_published == want[-1]["tx_seq"] + 1 and summary.files_published > 1
    files = sorted(os.listdir(cf))

    again = replay(str(workload), str(q), str(cf), PipelineOptions(sink="jsonl", file_rows=40, durable=False))
    assert again.transactions_published == 0 and sorted(os.listdir(cf)) == files


def test_another_queue_is_refused_in_one_line(jsonl_kind, workload: Path, tmp_path: Path):
    replay(str(workload), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(sink="jsonl", durable=False))
    with pytest.raises(jsonl_sink.JsonlSinkError, match=r"cf: written by queue [0-9a-f]+, not by .*q2"):
        replay(str(workload), str(tmp_path / "q2"), str(tmp_path / "cf"), PipelineOptions(sink="jsonl", durable=False))
    assert not (tmp_path / "q2").exists()  # a refused run removes the queue it made


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("fault", "checkpoint_seconds", "some_published"),
    [
        ("after_rename:3", 0, True),  # checkpoints all the time: the third file published, not yet checkpointed
        ("before_checkpoint:1", 3600, True),  # the only checkpoint, the last: everything published, none checkpointed
        ("after_append:3", 0, False),
    ],
)
def test_killed_and_run_again_every_transaction_is_there_once(
    workload: Path, tmp_path: Path, fault: str, checkpoint_seconds: float, some_published: bool
):
    """SIGKILL at a fault point (the sink's third file published; the sink flushed, the
    checkpoint not written, at the end; a block just appended), then the same replay again: the files
    published before the kill are not written twice, and nothing is missing."""
    q, cf = tmp_path / "q", tmp_path / "cf"
    args = [sys.executable, "-c", REPLAY, str(workload), str(q), str(cf), str(checkpoint_seconds)]
    killed = subprocess.run(
        args, check=False, env={**os.environ, "OLR_BUFFER_FAULT": fault}, capture_output=True, text=True, timeout=300
    )
    assert killed.returncode == -9, killed.stderr
    before = published(cf) if cf.exists() else []
    assert bool(before) or not some_published
    rerun = subprocess.run(args, check=False, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    after = published(cf)
    assert after == expected(workload)
    assert after[: len(before)] == before  # what was published before the kill stayed as it was
