"""The changefeed's integrity against operator mistakes and damage (issues 15 and 18):
one writer per changefeed, bound to its queue; files missing or damaged; permissions;
faults while opening it. Real processes, exact messages and exit codes; where a run
completes, the changefeed is exactly the contract model's."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lmdb
import pyarrow.parquet as pq
import pytest

from olr_buffer.simulate import simulate
from olr_buffer.txbuffer import LmdbQueue
from olr_buffer.txbuffer.metadata import QUEUE_ID_KEY
from tests.cli.conftest import Result, ok, olr_buffer
from tests.contract_model import changefeed_files, expected_changefeed
from tests.fault_helpers import (
    ROOT,
    exact,
    flip_a_data_byte,
    no_tmp_files,
    one_line_error,
    part_bytes,
    part_names,
    published_prefix,
    tmp_files,
    tmpfs,
    top_level_parquet,
)

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

FILE_ROWS = ("--file-rows", "40")


def cli(*args: Any, fault: str | None = None, umask: int | None = None) -> Result:
    """``python -m olr_buffer.cli ARGS``, optionally killed at a fault point."""
    return olr_buffer(*args, cwd=ROOT, fault=fault, umask=umask)


def replay(inp: Path, q: Path, cf: Path, *extra: Any, **kw: Any) -> Result:
    return cli("replay", inp, "--queue", q, "--changefeed", cf, *FILE_ROWS, *extra, **kw)


def queue_id(q: Path) -> str:
    queue = LmdbQueue(q, read_only=True)
    try:
        raw = queue.meta(QUEUE_ID_KEY)
    finally:
        queue.close()
    assert raw is not None
    return raw.decode()


def manifest(cf: Path) -> dict[str, Any]:
    return json.loads((cf / "_olr_buffer" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> tuple[Path, Path]:
    """Two different inputs (two databases, or two captures)."""
    root = tmp_path_factory.mktemp("cf-integrity")
    simulate(root / "in", threads=2, transactions=200, seed=7, records_per_file=100)
    simulate(root / "in2", threads=2, transactions=150, seed=8, records_per_file=100)
    return root / "in", root / "in2"


@pytest.fixture
def work(bases: tuple[Path, Path], tmp_path: Path) -> Path:
    shutil.copytree(bases[0], tmp_path / "in")
    shutil.copytree(bases[1], tmp_path / "in2")
    return tmp_path


# ---------------------------------------------------------------------------------------
# Issue 15: one writer per changefeed, bound to its queue


def _start_service(inp: Path, q: Path, cf: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "run",
            str(inp),
            "--queue",
            str(q),
            "--changefeed",
            str(cf),
            *FILE_ROWS,
            "--poll-interval",
            "0.02",
            "--flush-interval",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_a_second_writer_and_an_in_place_compaction_are_refused_while_one_writes(work: Path) -> None:
    cf = work / "cf"
    proc = _start_service(work / "in", work / "q1", cf)
    try:
        t0 = time.monotonic()
        while not (cf.is_dir() and changefeed_files(cf)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 60, "the service published nothing"
            time.sleep(0.05)
        busy = f"olr-buffer: error: {cf}: changefeed is in use by another process (pid {proc.pid}) (hint: "
        for second in (
            replay(work / "in2", work / "q2", cf),
            cli("run", work / "in2", "--queue", work / "q2", "--changefeed", cf),
            cli("compact", cf, "--in-place", "--i-know-no-reader-is-running"),
        ):
            assert one_line_error(second, code=1).startswith(busy), second.describe()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    # the refused processes wrote nothing: the first queue finishes the job exactly
    ok(replay(work / "in", work / "q1", cf))
    exact(cf, expected_changefeed(work / "in"))


def test_a_fresh_queue_on_a_written_changefeed_is_refused(work: Path) -> None:
    cf = work / "cf"
    ok(replay(work / "in", work / "q1", cf))
    owner = queue_id(work / "q1")
    assert manifest(cf)["queue_id"] == owner
    assert all(pq.read_metadata(p).metadata[b"olr_buffer.queue_id"].decode() == owner for p in changefeed_files(cf))
    before = part_bytes(cf)
    ids = set()
    for inp, q, cmd in (
        (work / "in2", work / "q2", "replay"),
        (work / "in", work / "q3", "replay"),
        (work / "in2", work / "q4", "run"),
    ):
        result = cli(cmd, inp, "--queue", q, "--changefeed", cf)
        line = one_line_error(result, code=1)
        m = re.fullmatch(
            rf"olr-buffer: error: {re.escape(str(cf))}: changefeed was written by queue {owner}; "
            rf"{re.escape(str(q))} is queue ([0-9a-f]{{32}}) \(hint: give each queue its own changefeed; .*"
            rf"run again with --adopt-changefeed \(docs/failure-scenarios\.md\)\)",
            line,
        )
        assert m, line
        ids.add(m.group(1))
    assert owner not in ids and len(ids) == 3
    assert part_bytes(cf) == before
    exact(cf, expected_changefeed(work / "in"))


def test_adopting_the_changefeed_of_a_lost_queue_is_exact(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    model = expected_changefeed(inp)
    killed = replay(inp, q, cf, fault="after_rename:3")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    published = published_prefix(cf, model)
    assert 0 < published < model.committed
    lost = queue_id(q)
    shutil.rmtree(q)  # the queue is lost; the input is still there
    one_line_error(replay(inp, q, cf), f"{cf}: changefeed was written by queue {lost}; {q} is queue ", code=1)
    before = part_bytes(cf)
    adopted = ok(replay(inp, q, cf, "--adopt-changefeed", "--json"))
    summary = adopted.json()
    exact(cf, model)
    after = part_bytes(cf)
    assert {n: after.get(n) for n in before} == before, "a published file changed"
    assert summary["transactions_published"] == model.committed - published
    assert summary["already_published"] >= published
    warning = [line for line in adopted.stderr_lines if "adopting the changefeed" in line]
    assert len(warning) == 1 and f"written by queue {lost}" in warning[0], adopted.describe()
    assert f"its {published} transactions" in warning[0], warning
    # the changefeed now belongs to the new queue: no flag needed any more
    assert manifest(cf)["queue_id"] == queue_id(q) != lost
    again = ok(replay(inp, q, cf, "--json")).json()
    assert again["transactions_published"] == 0
    exact(cf, model)


def test_adopting_logs_each_skipped_transaction(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    killed = replay(inp, q, cf, fault="after_rename:2")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    shutil.rmtree(q)
    adopted = ok(
        cli(
            "--log-level",
            "info",
            "replay",
            inp,
            "--queue",
            q,
            "--changefeed",
            cf,
            *FILE_ROWS,
            "--adopt-changefeed",
            "--json",
        )
    )
    skipped = [line for line in adopted.stderr_lines if "skipped as already published: xid " in line]
    assert len(skipped) == adopted.json()["already_published"] > 0


def _strip_owner(q: Path, cf: Path) -> None:
    """Make ``q`` and ``cf`` look as an earlier version wrote them: no owner anywhere."""
    for seg in (q / "segments").glob("seg-*.mdb"):
        env = lmdb.open(str(seg), subdir=False, max_dbs=2)
        with env.begin(write=True) as txn:
            txn.delete(QUEUE_ID_KEY, db=env.open_db(b"meta", txn=txn))
        env.close()
    for path in changefeed_files(cf):
        meta = {
            k: v
            for k, v in pq.read_metadata(path).metadata.items()
            if k.startswith(b"olr_buffer.") and k != b"olr_buffer.queue_id"
        }
        pq.write_table(pq.read_table(path).replace_schema_metadata(meta), path)
        assert b"olr_buffer.queue_id" not in pq.read_metadata(path).metadata
    doc = manifest(cf)
    del doc["queue_id"], doc["source_id"]
    (cf / "_olr_buffer" / "manifest.json").write_text(json.dumps(doc))


def test_a_changefeed_without_owner_is_adopted_by_its_queue_only(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    ok(replay(inp, q, cf))
    _strip_owner(q, cf)
    assert "queue_id" not in manifest(cf)
    one_line_error(
        replay(work / "in2", work / "q2", cf),
        f"{cf}: changefeed was written by a queue that did not record its id; {work / 'q2'} is queue ",
        code=1,
    )
    assert ok(replay(inp, q, cf, "--json")).json()["transactions_published"] == 0
    assert manifest(cf)["queue_id"] == queue_id(q)
    exact(cf, expected_changefeed(inp))


# ---------------------------------------------------------------------------------------
# Issue 18 item 4: files missing


@pytest.mark.parametrize("case", ["newest-file", "newest-file-and-manifest", "whole-changefeed"])
def test_a_changefeed_missing_files_is_refused(work: Path, case: str) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    ok(replay(inp, q, cf))
    n = expected_changefeed(inp).committed
    files = changefeed_files(cf)
    newest = files[-1]
    kept = int(newest.name[5:25])  # the files left hold tx_seq 0..kept-1
    if case == "whole-changefeed":
        shutil.rmtree(cf)
        kept = 0
    else:
        newest.unlink()
        if case == "newest-file-and-manifest":
            (cf / "_olr_buffer" / "manifest.json").unlink()
    before = part_bytes(cf)
    holds = f"tx_seq 0..{kept - 1}" if kept else "no transaction"
    for cmd in ("replay", "run"):
        result = cli(cmd, inp, "--queue", q, "--changefeed", cf)
        if case == "newest-file":
            one_line_error(
                result,
                f"{cf}: published files are missing: the manifest records tx_seq 0..{n - 1}, "
                f"the files hold {holds} (hint: put the missing files back",
                code=1,
            )
        else:
            one_line_error(
                result,
                f"{cf}: changefeed is behind its queue: it holds {holds}, the queue {q} "
                f"has published tx_seq 0..{n - 1} to it (hint: ",
                code=1,
            )
        assert part_bytes(cf) == before, "a refused run published"


# ---------------------------------------------------------------------------------------
# Issue 18 item 8: damage in the middle


@pytest.mark.parametrize("case", ["truncated", "foreign-parquet", "stray-file"])
def test_damage_in_the_middle_of_the_changefeed_is_refused(work: Path, case: str) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    ok(replay(inp, q, cf))
    files = changefeed_files(cf)
    middle = files[len(files) // 2]
    assert 0 < len(files) // 2 < len(files) - 1
    if case == "truncated":
        data = middle.read_bytes()
        middle.write_bytes(data[: len(data) // 2])
        want = f"{middle}: unreadable Parquet footer: "
    elif case == "foreign-parquet":
        pq.write_table(pq.read_table(middle).replace_schema_metadata({}), middle)
        want = f"{middle}: not a file of this changefeed: its footer lacks olr-buffer's range metadata (hint: "
    else:
        stray = cf / "extra.parquet"
        shutil.copyfile(middle, stray)
        want = f"{stray}: not a file of this changefeed (Spark would read it with the changefeed's files) (hint: "
    one_line_error(replay(inp, q, cf), want, code=1)


# ---------------------------------------------------------------------------------------
# Issue 18 item 11: permissions


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_changefeed_queue_and_dead_letters_are_owner_only_unless_told(work: Path) -> None:
    inp, q, cf, dead = work / "in", work / "q", work / "cf", work / "dead.jsonl"
    ok(replay(inp, q, cf, "--dead-letter", dead, umask=0o022))
    assert (_mode(cf), _mode(cf / "_olr_buffer"), _mode(dead)) == (0o700, 0o700, 0o600)
    assert {_mode(p) for p in changefeed_files(cf)} == {0o600}
    # a lake group reads the changefeed
    ok(replay(inp, q, cf, "--changefeed-mode", "0750", umask=0o077))
    assert (_mode(cf), _mode(cf / "_olr_buffer")) == (0o750, 0o700)
    assert {_mode(p) for p in changefeed_files(cf)} == {0o640}
    # what an earlier version left readable by everyone is tightened
    for d in (cf, q, q / "segments"):
        d.chmod(0o755)
    for p in changefeed_files(cf):
        p.chmod(0o644)
    dead.chmod(0o644)
    ok(replay(inp, q, cf, "--dead-letter", dead, umask=0o022))
    assert (_mode(cf), _mode(q), _mode(q / "segments"), _mode(dead)) == (0o700, 0o700, 0o700, 0o600)
    assert {_mode(p) for p in changefeed_files(cf)} == {0o600}
    bad = cli("replay", inp, "--queue", q, "--changefeed", cf, "--changefeed-mode", "0640")
    assert bad.returncode == 2 and "the owner needs rwx" in bad.stderr, bad.describe()
    exact(cf, expected_changefeed(inp))


# ---------------------------------------------------------------------------------------
# Issue 18 item 7 and smaller ones: one line for faults while opening the changefeed


def test_full_disk_while_recovering_the_changefeed_is_one_line(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    model = expected_changefeed(inp)
    with tmpfs(cf, "2m"):
        killed = replay(inp, q, cf, fault="after_rename:3")  # the third file is not in the manifest yet
        assert killed.returncode == -signal.SIGKILL, killed.describe()
        filler = cf / "_olr_buffer" / "filler"
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        line = one_line_error(
            replay(inp, q, cf), "cannot write it: no space left on device (hint: free disk space", code=1
        )
        assert line.startswith(f"olr-buffer: error: {cf}/_olr_buffer/"), line
        assert ".tmp" not in line, line
        filler.unlink()
        ok(replay(inp, q, cf))
        exact(cf, model)


def test_immutable_metadata_directory_is_one_line(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    killed = replay(inp, q, cf, fault="after_rename:3")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    meta = cf / "_olr_buffer"
    if subprocess.run(["chattr", "+i", str(meta)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        one_line_error(
            replay(inp, q, cf),
            f"{meta}/manifest.json: cannot write it: Operation not permitted "
            "(hint: make the changefeed directory writable",
            code=1,
        )
    finally:
        subprocess.run(["chattr", "-i", str(meta)], check=True)
    ok(replay(inp, q, cf))
    exact(cf, expected_changefeed(inp))


def test_read_only_changefeed_says_what_failed(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    with tmpfs(cf, "4m"):
        killed = replay(inp, q, cf, fault="after_rename:2")
        assert killed.returncode == -signal.SIGKILL, killed.describe()
        subprocess.run(["mount", "-o", "remount,ro", str(cf)], check=True, capture_output=True)
        line = one_line_error(
            replay(inp, q, cf), "Read-only file system (hint: make the changefeed directory writable", code=1
        )
        assert "cannot create the changefeed directory" not in line, line
        subprocess.run(["mount", "-o", "remount,rw", str(cf)], check=True, capture_output=True)
        ok(replay(inp, q, cf))
        exact(cf, expected_changefeed(inp))


def test_only_own_temporary_files_are_deleted(work: Path) -> None:
    inp, q, cf = work / "in", work / "q", work / "cf"
    killed = replay(inp, q, cf, fault="after_tmp_written:2")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    own = tmp_files(cf)
    assert len(own) == 1 and re.fullmatch(r"_olr_buffer/tmp/part-[0-9]{20}-[0-9]+\.parquet\.tmp", own[0]), own
    # what a version before _olr_buffer/tmp/ left at the top level is olr-buffer's too
    old = [
        ".tmp-part-00000000000000000004-4242.parquet",
        ".tmp-compact-part-00000000000000000000-00000000000000000003.parquet",
    ]
    for name in old:
        shutil.copyfile(cf / own[0], cf / name)
    foreign = [
        ".tmp-notes",
        ".tmp-part-backup.parquet",
        ".tmp-compact-part-x.parquet",
        "_olr_buffer/tmp/notes.parquet.tmp",
    ]
    for name in foreign:
        (cf / name).write_text("not olr-buffer's")
    ok(replay(inp, q, cf))
    assert tmp_files(cf) == sorted(foreign[3:]) + sorted(foreign[:3])
    exact_rows = expected_changefeed(inp)
    for name in foreign:
        (cf / name).unlink()
    exact(cf, exact_rows)


# ---------------------------------------------------------------------------------------
# Issue 29: what readers other than Spark see; damage in the newest file; metadata modes


@pytest.mark.parametrize("fault", ["after_row_group:2", "after_tmp_written:2"])
def test_temporary_files_are_out_of_sight_of_parquet_globs(work: Path, fault: str) -> None:
    """A file being written (partial: no footer yet; or complete, not yet renamed) is
    matched by no ``*.parquet`` glob of the changefeed, top level or recursive: DuckDB's
    and Polars' ``cf/*.parquet`` (which match dot-files) read exactly the published files."""
    inp, q, cf = work / "in", work / "q", work / "cf"
    model = expected_changefeed(inp)
    killed = replay(inp, q, cf, fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    (temp,) = tmp_files(cf)
    with pytest.raises(Exception) if fault.startswith("after_row_group") else contextlib.nullcontext():
        pq.read_metadata(cf / temp)  # partial: no footer, as DuckDB found ("No magic bytes found")
    published = part_names(cf)
    assert published and top_level_parquet(cf) == published
    assert sorted(str(p.relative_to(cf)) for p in cf.rglob("*.parquet")) == published
    # read as DuckDB and Polars would read the glob: each published row once
    rows = pq.read_table([str(cf / n) for n in top_level_parquet(cf)]).num_rows
    n = published_prefix(cf, model)
    assert rows == sum(1 for r in model.rows if r["tx_seq"] < n)
    ok(replay(inp, q, cf))
    no_tmp_files(cf)
    exact(cf, model)


def test_files_of_the_metadata_directory_are_owner_only_whatever_the_umask(work: Path) -> None:
    """``_olr_buffer/`` is 0700 and its files 0600, as the Parquet files are by default:
    the umask does not open them (docs/formats.md), and an earlier version's are tightened."""
    inp, q, cf = work / "in", work / "q", work / "cf"
    meta = cf / "_olr_buffer"
    killed = replay(inp, q, cf, "--changefeed-mode", "0750", fault="after_rename:2", umask=0o002)
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    assert {n: _mode(meta / n) for n in ("manifest.json", "published.jsonl")} == {
        "manifest.json": 0o600,
        "published.jsonl": 0o600,
    }
    for name in ("manifest.json", "published.jsonl"):
        (meta / name).chmod(0o664)  # as an earlier version left them
    ok(replay(inp, q, cf, "--changefeed-mode", "0750", umask=0o002))
    assert {n: _mode(meta / n) for n in ("manifest.json", "published.jsonl")} == {
        "manifest.json": 0o600,
        "published.jsonl": 0o600,
    }
    assert (_mode(cf), _mode(meta), {_mode(p) for p in changefeed_files(cf)}) == (0o750, 0o700, {0o640})
    compacted = cli("compact", cf, "--in-place", "--i-know-no-reader-is-running", "--target-rows", "1000", umask=0o002)
    ok(compacted)
    assert {n: _mode(meta / n) for n in ("manifest.json", "published.jsonl", "compactions.jsonl")} == {
        "manifest.json": 0o600,
        "published.jsonl": 0o600,
        "compactions.jsonl": 0o600,
    }
    assert {_mode(p) for p in changefeed_files(cf)} == {0o640}


def test_a_damaged_newest_file_is_refused_at_start(work: Path) -> None:
    """Every page carries a checksum; the newest file's pages are read and checked at
    start, so a flipped bit in it stops the run with one line naming it."""
    inp, q, cf = work / "in", work / "q", work / "cf"
    killed = replay(inp, q, cf, fault="after_rename:3")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    newest = changefeed_files(cf)[-1]
    with pq.ParquetFile(newest, page_checksum_verification=True) as pf:
        pf.read()  # intact before the flip
    flip_a_data_byte(newest)
    line = one_line_error(
        replay(inp, q, cf),
        f"{newest}: damaged data: ",
        "CRC checksum verification failed",
        "(hint: the file changed after it was published",
        code=1,
    )
    assert "Traceback" not in line
    assert changefeed_files(cf)[-1] == newest  # nothing published after it
