"""PySpark is an extra (``olr-buffer[spark]``): the service and its commands install and
run without it, and the Spark helpers say what to install.

A fresh virtual environment without PySpark would take a minute to build; instead the
commands run in real processes where PySpark cannot be imported: a ``sitecustomize`` on
PYTHONPATH puts an import blocker first on ``sys.meta_path`` (in the reader processes and
their fork server too, which start from the same environment) and records every attempt."""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.contract_model import load_changefeed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """
import os, sys

class _NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            with open(os.environ["PYSPARK_ATTEMPTS"], "a") as fh:
                fh.write(f"{os.getpid()} {sys.argv[:2]} imported {name}\\n")
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NoPySpark())
"""


@pytest.fixture
def no_pyspark(tmp_path: Path) -> dict[str, str]:
    """The environment of a process in which ``import pyspark`` fails (and is recorded)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "PYSPARK_ATTEMPTS": str(tmp_path / "pyspark-attempts.txt"),
    }


def olr(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def attempts(env: dict) -> str:
    path = Path(env["PYSPARK_ATTEMPTS"])
    return path.read_text() if path.exists() else ""


def test_the_blocker_blocks(no_pyspark):
    r = subprocess.run([sys.executable, "-c", "import pyspark.sql"], capture_output=True, text=True, env=no_pyspark)
    assert r.returncode != 0 and "blocked by the test" in r.stderr
    assert "imported pyspark" in attempts(no_pyspark)


def test_commands_run_without_pyspark(tmp_path: Path, no_pyspark):
    inp, q, cf = tmp_path / "in", tmp_path / "q", tmp_path / "cf"
    r = olr(
        no_pyspark,
        "simulate",
        str(inp),
        "--threads",
        "2",
        "--transactions",
        "80",
        "--seed",
        "3",
        "--start-time",
        "2024-06-01T00:00:00Z",
    )
    assert r.returncode == 0, r.stderr
    r = olr(no_pyspark, "replay", str(inp), "--queue", str(q), "--changefeed", str(cf), "--json")
    assert r.returncode == 0, r.stderr
    published = json.loads(r.stdout)["transactions_published"]
    assert published > 0
    for extra in ([], ["--json"]):
        r = olr(no_pyspark, "status", "--queue", str(q), *extra)
        assert r.returncode == 0 and "stopped" in r.stdout, r.stderr
    r = olr(no_pyspark, "compact", str(cf), "--output", str(tmp_path / "compacted"))
    assert r.returncode == 0, r.stderr
    assert len(load_changefeed(tmp_path / "compacted")) == len(load_changefeed(cf))

    # the service, with its reader processes, follows a second queue's input until SIGTERM
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "run",
            str(inp),
            "--queue",
            str(tmp_path / "q2"),
            "--changefeed",
            str(tmp_path / "cf2"),
            "--flush-interval",
            "0.2",
            "--checkpoint-interval",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=no_pyspark,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "cf2").is_dir() or not list((tmp_path / "cf2").glob("part-*.parquet")):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "run published nothing within 60s"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped cleanly" in err
    assert attempts(no_pyspark) == ""


def test_a_spark_helper_says_what_to_install(tmp_path: Path, no_pyspark):
    code = (
        "import olr_buffer.spark as s\n"
        "for name in ('read_changefeed', 'stream_changefeed', 'snapshot', 'table_changes', 'infer_schema',\n"
        "             'changefeed_schema', 'CHANGEFEED_SCHEMA'):\n"
        "    try:\n"
        "        f = getattr(s, name)\n"
        "        f(None, 'cf', 'O', 'T') if name in ('snapshot', 'table_changes', 'infer_schema') else f(None, 'cf')\n"
        "    except s.PySparkMissingError as exc:\n"
        "        assert isinstance(exc, ImportError) and exc.name == 'pyspark'\n"
        "        print(name, '->', exc)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=no_pyspark, cwd=ROOT, timeout=60
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 7, r.stdout
    for line in lines:
        assert re.fullmatch(
            r"\S+ -> olr_buffer\.spark\.\w+ needs PySpark, which is not installed: "
            r"pip install 'olr-buffer\[spark\]' \(or pyspark>=3\.5\)",
            line,
        ), line


def test_pyspark_is_an_extra_and_the_service_image_leaves_it_out():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    install = cfg["options"]["install_requires"]
    extras = cfg["options.extras_require"]
    assert "pyspark" not in install
    assert "pyspark" in extras["spark"] and "pyspark" in extras["test"]
    # the installed distribution's metadata says the same
    requires = importlib.metadata.requires("olr-buffer") or []
    assert [r for r in requires if r.startswith("pyspark")] and all(
        "extra ==" in r for r in requires if r.startswith("pyspark")
    )
    # the service's container image installs the package without its spark extra
    containerfile = (ROOT / "docs" / "examples" / "Containerfile").read_text()
    installs = [line for line in containerfile.splitlines() if "pip install" in line]
    assert installs and all("/src" in line and "[" not in line and "pyspark" not in line for line in installs)
    # make demo and make test install the spark and test extras
    assert "-e '.[spark,test]'" in (ROOT / "Makefile").read_text()
