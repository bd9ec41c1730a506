"""Another program commits to a Delta changefeed's table while `olr-buffer run` writes it:
a deltalake append, a deltalake OPTIMIZE. `run` stops at its next commit with one line
naming the version and what it did, and commits nothing more to the table; a VACUUM
(which changes no file of the table) does not stop a writer. The recovery the
error and docs/failure-scenarios.md give (restore the version before, delete the files
it added) makes the table exact again; started without it, `run` refuses the table
with a hint that does not break it further."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from tests.contract_model import assert_changefeed_equal, expected_changefeed
from tests.processes import run_args

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("foreign") / "input"
    simulate(out, threads=2, transactions=200, seed=32, records_per_file=250, compress_archived=False)
    return out


def sequences(staged: Path) -> list[tuple[int, int, Path]]:
    found = []
    for p in staged.iterdir():
        m = re.fullmatch(r"redo_(\d+)_(\d+)\.jsonl", p.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), p))
    return sorted(found)


def copy_input(staged: Path, live: Path, *, first_half: bool) -> None:
    """The first half of each thread's sequences (``first_half``), or the rest."""
    live.mkdir(exist_ok=True)
    last = {}
    for thread, seq, _ in sequences(staged):
        last[thread] = max(last.get(thread, 0), seq)
    for thread, seq, p in sequences(staged):
        if (seq <= max(1, last[thread] // 2)) == first_half:
            shutil.copyfile(p, live / p.name)


def start_run(tmp: Path) -> subprocess.Popen:
    return subprocess.Popen(
        run_args(
            tmp / "live",
            tmp,
            "--table-format",
            "delta",
            "--file-rows",
            "150",
            "--flush-interval",
            "0.2",
            "--poll-interval",
            "0.02",
            "--checkpoint-interval",
            "0.5",
            "--log-level",
            "warning",
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def published(cf: Path) -> int:
    try:
        return json.loads((cf / "_olr_buffer" / "manifest.json").read_text())["next_tx_seq"]
    except (OSError, ValueError, KeyError):
        return -1


def wait_published(proc: subprocess.Popen, cf: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while published(cf) < n:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"the changefeed holds {published(cf)} transactions, not {n}"
        time.sleep(0.1)


def stopped_with(proc: subprocess.Popen, cf: Path | None = None, committed: int | None = None) -> str:
    """The one line a stopped `run` wrote (exit code 1); given the changefeed and the
    transactions of the whole input: a run that published them all and goes on fails."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        assert cf is None or published(cf) < committed, "run went on past the other writer's commit"
        time.sleep(0.1)
    code = proc.wait(timeout=10)
    err = proc.stderr.read()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return lines[-1]


def table_rows(cf: Path) -> list[dict]:
    from deltalake import DeltaTable

    rows = DeltaTable(str(cf)).to_pyarrow_table().drop_columns(["c_ts", "ts"]).to_pylist()
    for r in rows:
        for col in ("before", "after"):
            r[col] = json.loads(r[col]) if r[col] is not None else None
    return sorted(rows, key=lambda r: (r["tx_seq"], r["op_seq"]))


def foreign(cf: Path) -> int:
    """The one version of the table that olr-buffer did not commit."""
    from deltalake import DeltaTable

    found = [h["version"] for h in DeltaTable(str(cf)).history() if "olr_buffer.app_id" not in h]
    assert len(found) == 1, found
    return found[0]


def added_by(cf: Path, version: int) -> list[str]:
    text = (cf / "_delta_log" / f"{version:020d}.json").read_text()
    return [a["add"]["path"] for a in map(json.loads, text.splitlines()) if "add" in a]


def recover(tmp: Path, line: str) -> None:
    """What the error's hint says: restore the version before the foreign commit, delete
    the files it added; then `run` again, to the end."""
    from deltalake import DeltaTable

    cf = tmp / "cf"
    version = int(re.search(r"Delta version (\d+) was committed by another writer", line).group(1))
    assert f"restore the table to version {version - 1}" in line
    foreign = added_by(cf, version)
    DeltaTable(str(cf)).restore(version - 1)
    for name in foreign:
        (cf / name).unlink()
    model = expected_changefeed(tmp / "live")
    proc = start_run(tmp)
    try:
        wait_published(proc, cf, model.committed)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
    assert_changefeed_equal(table_rows(cf), model.rows)


def test_a_foreign_append_stops_run_at_its_next_commit(staged, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    cf = tmp_path / "cf"
    copy_input(staged, tmp_path / "live", first_half=True)
    proc = start_run(tmp_path)
    try:
        wait_published(proc, cf, 1)
        write_deltalake(str(cf), DeltaTable(str(cf)).to_pyarrow_table().slice(0, 3), mode="append")
        copy_input(staged, tmp_path / "live", first_half=False)
        line = stopped_with(proc, cf, expected_changefeed(tmp_path / "live").committed)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    foreign_version = foreign(cf)
    assert f"Delta version {foreign_version} was committed by another writer (WRITE by delta-rs" in line
    assert "1 file(s) added" in line and "olr-buffer must be the only writer" in line
    # nothing of ours after it: the table holds the foreign commit last
    assert DeltaTable(str(cf)).version() == foreign_version
    recover(tmp_path, line)


def test_a_foreign_optimize_stops_run_and_the_restart_hint_does_not_break_the_table(staged, tmp_path):
    from deltalake import DeltaTable

    cf = tmp_path / "cf"
    copy_input(staged, tmp_path / "live", first_half=True)
    proc = start_run(tmp_path)
    try:
        wait_published(proc, cf, 1)
        deadline = time.monotonic() + 120
        while len(DeltaTable(str(cf)).file_uris()) < 2:  # an OPTIMIZE of one file commits nothing
            assert proc.poll() is None and time.monotonic() < deadline, "run committed fewer than two files"
            time.sleep(0.1)
        assert DeltaTable(str(cf)).optimize.compact()["numFilesRemoved"] >= 2
        copy_input(staged, tmp_path / "live", first_half=False)
        line = stopped_with(proc, cf, expected_changefeed(tmp_path / "live").committed)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    foreign_version = foreign(cf)
    assert f"Delta version {foreign_version} was committed by another writer (OPTIMIZE by delta-rs" in line
    # started again as it is: refused, naming the file, and not told to move it out
    merged = added_by(cf, foreign_version)
    line = stopped_with(start_run(tmp_path))
    assert f"{cf / merged[0]}: the changefeed's Delta table holds a file olr-buffer did not write" in line
    assert "move" not in line.split("(hint:")[1].split(";")[0]
    assert os.path.exists(cf / merged[0])
    recover(tmp_path, stopped_with_version(foreign_version))


def stopped_with_version(version: int) -> str:
    """The stop line's recovery part, for a table whose run was refused at start-up."""
    return (
        f"Delta version {version} was committed by another writer (OPTIMIZE): restore the table to version "
        f"{version - 1}"
    )
