"""A `run` refused at start leaves nothing behind (issue 29.8): not the new queue, not the
new changefeed directory it would have written."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.sources.postgres.conftest import ROOT, run_cmd, start_service, wait_streaming

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


def test_a_run_refused_because_the_slot_is_in_use_leaves_no_directory(pg_db, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = start_service(pg_db, tmp_path / "a")
    try:
        wait_streaming(tmp_path / "a", first)
        refused = subprocess.run(run_cmd(pg_db, tmp_path / "b"), capture_output=True, text=True, timeout=60, cwd=ROOT)
    finally:
        first.terminate()
        first.wait(30)
    assert refused.returncode == 1, refused.stderr
    assert "in use by another connection" in refused.stderr, refused.stderr
    assert os.listdir(tmp_path / "b") == [], os.listdir(tmp_path / "b")
    assert first.returncode == 0
