"""Permissions, for real (issue 29.7): a directory or file this user may not read or write
is one line and exit 1 (the environment, which a supervisor retries), never a traceback,
exit 2 (usage) or exit 3 (bad input); once fixed, the same command finishes the job.

As root the commands run without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv), so
that the kernel checks permissions as it does for any other user: EACCES, for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olr_buffer.simulate import simulate
from tests.cli.conftest import TIMEOUT, Result, ok
from tests.contract_model import expected_changefeed
from tests.fault_helpers import ROOT, exact, one_line_error

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

_NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def as_user(*args: Any) -> Result:
    """``python -m olr_buffer.cli ARGS`` as a process whose permission checks are real."""
    argv = [os.fspath(a) for a in args]
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, these tests need setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        prefix = _NO_DAC
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "olr_buffer.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
    )
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("perm") / "in"
    simulate(out, threads=2, transactions=150, seed=29, records_per_file=150, compress_archived=False)
    return out


@pytest.fixture
def inp(base: Path, tmp_path: Path) -> Path:
    shutil.copytree(base, tmp_path / "in")
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    readable = (
        as_user("simulate", "--help").returncode == 0
        and subprocess.run(
            [*(_NO_DAC if os.geteuid() == 0 else []), sys.executable, "-c", f"open({str(probe)!r})"],
            capture_output=True,
        ).returncode
        == 0
    )
    probe.unlink()
    if readable:
        pytest.skip("permission checks are not enforced for this user here")
    return tmp_path / "in"


@pytest.mark.parametrize("command", ["replay", "run"])
def test_a_queue_directory_the_user_may_not_create_is_one_line(inp: Path, tmp_path: Path, command: str) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    q, cf = locked / "q", tmp_path / "cf"
    failed = as_user(command, inp, "--queue", q, "--changefeed", cf)
    one_line_error(failed, f"{q}: cannot open the queue directory: permission denied (hint: ", code=1)
    assert not q.exists()
    locked.chmod(0o755)
    ok(as_user("replay", inp, "--queue", q, "--changefeed", cf))
    exact(cf, expected_changefeed(inp))


def test_an_unreadable_existing_queue_is_exit_1_not_a_usage_error(inp: Path, tmp_path: Path) -> None:
    q, cf = tmp_path / "q", tmp_path / "cf"
    ok(as_user("replay", inp, "--queue", q, "--changefeed", cf))
    q.chmod(0)
    try:
        for args in (("replay", inp, "--queue", q, "--changefeed", cf), ("status", "--queue", q)):
            one_line_error(as_user(*args), f"{q}/segments: cannot open the queue directory: permission denied", code=1)
        (q.chmod(0o700), (q / "segments").chmod(0))
        one_line_error(
            as_user("replay", inp, "--queue", q, "--changefeed", cf),
            f"{q}/segments: cannot read the queue directory: permission denied",
            code=1,
        )
    finally:
        q.chmod(0o700)
        (q / "segments").chmod(0o700)
    ok(as_user("status", "--queue", q))
    exact(cf, expected_changefeed(inp))


def test_an_unreadable_redo_file_is_exit_1_and_the_same_command_resumes(inp: Path, tmp_path: Path) -> None:
    q, cf = tmp_path / "q", tmp_path / "cf"
    log = inp / "redo_1_2.jsonl"
    log.chmod(0)
    failed = as_user("replay", inp, "--queue", q, "--changefeed", cf)
    log.chmod(0o644)
    one_line_error(failed, f"{log}: cannot open it: permission denied (hint: ", code=1)
    ok(as_user("replay", inp, "--queue", q, "--changefeed", cf))
    exact(cf, expected_changefeed(inp))


def test_an_unreadable_input_directory_is_exit_1(inp: Path, tmp_path: Path) -> None:
    q, cf = tmp_path / "q", tmp_path / "cf"
    inp.chmod(0o300)
    try:
        for command in ("replay", "run"):
            failed = as_user(command, inp, "--queue", q, "--changefeed", cf)
            one_line_error(failed, f"{inp}: cannot list the input directory: permission denied", code=1)
    finally:
        inp.chmod(0o755)


def test_an_unreadable_dead_letter_file_is_exit_1(inp: Path, tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    dead.touch()
    dead.chmod(0)
    failed = as_user("replay", inp, "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf", "--dead-letter", dead)
    one_line_error(failed, f"{dead}: cannot open it: permission denied", code=1)
