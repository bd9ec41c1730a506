"""The worked example of docs/architecture.md, "Adding a source": docs/examples/lines_source.py,
a source written from the Source contract alone, run end to end by the real ``olr-buffer``
(``replay`` and ``run``, in a subprocess) with its scheme added to the table."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.sources.base import Source
from tests.contract_model import load_changefeed

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
sys.path.insert(0, str(EXAMPLES))
import lines_source  # noqa: E402  (docs/examples is not a package)

#: ``olr-buffer`` with the example's scheme in the table, as one line in SCHEMES would add it
MAIN = (
    f"import sys; sys.path.insert(0, {str(EXAMPLES)!r}); from olr_buffer.sources import SCHEMES; "
    "SCHEMES['lines'] = 'lines_source'; from olr_buffer.cli import main; sys.exit(main())"
)


def olr_buffer(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", MAIN, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(first_scn: int, transactions: int) -> str:
    out = []
    for i in range(transactions):
        scn, xid = first_scn + 2 * i, f"t{first_scn + i}"
        out.append({"scn": scn, "xid": xid, "op": "begin"})
        out.append({"scn": scn, "xid": xid, "op": "insert", "table": "SHOP.ITEMS", "after": {"ID": scn}})
        out.append({"scn": scn + 1, "xid": xid, "op": "commit"})
    return "".join(json.dumps(m) + "\n" for m in out)


def test_the_example_implements_the_contract():
    """Its members are the contract's, no more: the runner owns the rest."""
    members = {n for n in vars(Source) if not n.startswith("_")} | set(Source.__annotations__)
    assert members == {"name", "state_prefix", "prepare", "readers", "acknowledge", "figures"}
    own = {n for n in vars(lines_source.LinesSource) if not n.startswith("_")}
    assert own == members - {"name"}  # name: set in __init__


@pytest.mark.e2e
def test_replay_then_run_the_example_source(tmp_path: Path):
    src, q, cf = tmp_path / "changes.jsonl", tmp_path / "q", tmp_path / "cf"
    src.write_text(lines(100, 3))
    p = olr_buffer("replay", f"lines://{src}", "--queue", str(q), "--changefeed", str(cf), "--json")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert json.loads(out)["transactions_published"] == 3
    assert [r["after"] for r in load_changefeed(cf)] == [{"ID": s} for s in (100, 102, 104)]

    # run follows the file from where replay left it, and publishes what is appended
    p = olr_buffer("run", f"lines://{src}", "--queue", str(q), "--changefeed", str(cf), "--flush-interval", "0.1")
    try:
        with src.open("a") as f:
            f.write(lines(200, 2))
        deadline = time.monotonic() + 120
        while len(load_changefeed(cf)) < 5:
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()[1]
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert [r["after"]["ID"] for r in load_changefeed(cf)] == [100, 102, 104, 200, 202]


@pytest.mark.e2e
def test_a_bad_line_of_the_example_is_one_line_and_exit_3(tmp_path: Path):
    src = tmp_path / "changes.jsonl"
    src.write_text(lines(100, 1) + "not json\n")
    p = olr_buffer("replay", f"lines://{src}", "--queue", str(tmp_path / "q"), "--changefeed", str(tmp_path / "cf"))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 3, err
    assert f"{src}:4: not a change" in err and "Traceback" not in err
