"""A bad value in the --config file is reported against the file and its key, in one
line, exit 2, before anything is made; not against the option and its environment variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from olr_buffer import errors
from tests.cli.conftest import olr_buffer


@pytest.mark.parametrize(
    "command, text, key, reason",
    [
        ("run", 'flush_interval = "soon"', "flush_interval", "'soon' is not a valid float range"),
        ("run", "flush-interval = -3", "flush_interval", "-3.0 is not in the range x>=0"),
        ("run", 'threads = ["x"]', "threads", "'x' is not a list of thread numbers like 1,2"),
        ("replay", 'segment_size = "big"', "segment_size", "'big' is not a size like 64MiB"),
        ("replay", 'no_sync = "perhaps"', "no_sync", "'perhaps' is not a valid boolean"),
        ("compact", "target_rows = 0", "target_rows", "0 is not in the range x>=1"),
    ],
)
def test_a_bad_value_names_the_file_and_key(tmp_path: Path, command: str, text: str, key: str, reason: str):
    cfg = tmp_path / "olr.toml"
    cfg.write_text(f'queue = "{tmp_path / "q"}"\nchangefeed = "{tmp_path / "cf"}"\n{text}\n')
    target = (
        [str(tmp_path / "cf"), "--output", str(tmp_path / "out")] if command == "compact" else [str(tmp_path / "in")]
    )
    r = olr_buffer(command, *target, "--config", cfg)
    assert r.returncode == errors.EXIT_USAGE, r.describe()
    error = [line for line in r.stderr_lines if line.startswith("Error:")]
    assert len(error) == 1 and error[0].startswith(f"Error: {cfg}: key '{key}': {reason}"), r.describe()
    assert "--" not in error[0] and "OLR_BUFFER_" not in error[0]  # not the option, not its variable
    assert not (tmp_path / "q").exists() and not (tmp_path / "out").exists()


def test_a_bad_value_in_the_environment_is_still_the_variables(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OLR_BUFFER_RUN_FLUSH_INTERVAL", "soon")
    r = olr_buffer("run", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert r.returncode == errors.EXIT_USAGE
    assert "'--flush-interval' (env var: 'OLR_BUFFER_RUN_FLUSH_INTERVAL')" in r.stderr
