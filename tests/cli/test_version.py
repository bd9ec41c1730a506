"""``olr-buffer --version``: the version, and for each compiled extension (the redo
reader's loop, the PostgreSQL reader's insert step, the read-back of committed rows to
columns, the dispatcher's batch step) whether it runs compiled or in pure Python, and why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import olr_buffer
from olr_buffer.sources.redo.compiled import PURE_PYTHON_ENV

CMD = [sys.executable, "-m", "olr_buffer.cli", "--version"]


def version(env: dict, cwd: Path | None = None) -> str:
    return subprocess.run(CMD, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_version_names_each_compiled_step_and_the_variable_turns_both_off() -> None:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    assert version(env).endswith(
        "(redo reader loop: compiled; PostgreSQL insert step: compiled; read-back to columns: compiled; "
        "dispatcher batch step: compiled)"
    )
    pure = f"pure Python ({PURE_PYTHON_ENV} is set)"
    assert version({**env, PURE_PYTHON_ENV: "1"}).endswith(
        f"(redo reader loop: {pure}; PostgreSQL insert step: {pure}; read-back to columns: {pure}; "
        f"dispatcher batch step: {pure})"
    )


def test_version_says_which_extension_was_not_built(tmp_path: Path) -> None:
    """A tree whose PostgreSQL step, read-back step and batch step were not built (no
    ``tuplescan``, ``recscan`` and ``batchscan`` extensions) runs the redo loop compiled and
    the others in pure Python: ``--version`` says each."""
    package = Path(olr_buffer.__file__).parent
    shutil.copytree(
        package,
        tmp_path / "olr_buffer",
        ignore=shutil.ignore_patterns("tuplescan*.so", "recscan*.so", "batchscan*.so", "__pycache__"),
    )
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    env["PYTHONPATH"] = str(tmp_path)
    assert version(env, cwd=tmp_path).endswith(
        "(redo reader loop: compiled; PostgreSQL insert step: "
        "pure Python (the compiled insert step was not built at install); read-back to columns: "
        "pure Python (the compiled read-back step was not built at install); dispatcher batch step: "
        "pure Python (the compiled batch step was not built at install))"
    )
