"""The program does not import pandas (pyarrow's first array would, only to look for it),
and code of the program that hands pandas objects to pyarrow gets pyarrow's pandas
handling back (``allow_pandas``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from tests.contract_model import assert_changefeed_equal, load_changefeed

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = {
    "olr-buffer": [str(Path(sys.executable).parent / "olr-buffer")],
    "python -m olr_buffer.cli": [sys.executable, "-m", "olr_buffer.cli"],
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def test_pandas_is_installed_here():
    """(The tests below show something only where pandas is installed: the test extra
    installs it, as the spark extra does for users.)"""
    assert importlib.util.find_spec("pandas") is not None


#: sitecustomize for the program's process: at exit, it writes which of these are imported
AT_EXIT = """
import atexit, os, sys

atexit.register(lambda: open(os.environ["OLR_TEST_MODULES"], "w").write(
    " ".join(m for m in ("pyarrow", "pandas") if m in sys.modules)))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("program", PROGRAMS)
def test_the_program_replays_without_importing_pandas(tmp_path, program):
    simulate(tmp_path / "in", threads=2, transactions=60, seed=3, records_per_file=200)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AT_EXIT)
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join((str(site), env["PYTHONPATH"]))
    env["OLR_TEST_MODULES"] = str(tmp_path / "modules")
    r = subprocess.run(
        [*PROGRAMS[program], "replay", str(tmp_path / "in"), "--queue", str(tmp_path / "q"),
         "--changefeed", str(tmp_path / "cf"), "--no-progress", "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "modules").read_text() == "pyarrow"
    # the changefeed is the same as one written where pyarrow has pandas
    replay(str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"), PipelineOptions())
    rows = load_changefeed(tmp_path / "cf")
    assert json.loads(r.stdout)["rows_published"] == len(rows) > 0
    assert_changefeed_equal(rows, load_changefeed(tmp_path / "cf2"))


PYARROW_AND_PANDAS = """
import pyarrow as pa
from olr_buffer.cli.pandas_probe import allow_pandas, skip_pandas

skip_pandas()
try:
    import pandas
except ImportError as exc:
    print("no pandas:", exc)
pa.array([1.0, None])  # (Arrow looks for pandas to infer a type)
allow_pandas()
import pandas as pd

print(pa.array(pd.Series([1.0, None])).null_count)  # as pandas: its missing value is null
"""


def test_skip_pandas_then_allow_pandas():
    r = subprocess.run(
        [sys.executable, "-c", PYARROW_AND_PANDAS], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [
        "no pandas: pandas is not imported by olr-buffer's commands (see olr_buffer/cli/pandas_probe.py)",
        "1",
    ]
