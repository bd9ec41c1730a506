"""End to end: ``simulate`` -> ``run`` (redo files) -> changefeed A -> ``serve`` ->
``run olr://`` -> changefeed B. B holds the same transactions, rows and columns as A,
for every column that OpenLogReplicator's protocol carries (contracts sections 6 and 7).

What does not travel, and what B holds instead:

* ``sub``: not in the messages; 0.
* ``thread``: ``serve`` sends no ``rth``; 1.
* ``tm`` of a row: ``serve`` sends the row's ``tm``, or the commit's when the row has
  none; so B's is A's ``tm``, else A's ``c_tm``.

The rest (``tx_seq``, ``op_seq``, ``c_scn``, ``c_tm``, ``xid``, ``op``, ``scn``, ``owner``,
``table``, ``obj``, ``rid``, ``before``, ``after`` (the same JSON text, byte for byte),
``sql``) is the same.
"""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from tests.contract_model import check_changefeed_layout, expected_changefeed, load_changefeed
from tests.sources.olr.paths import CLI, ROOT
from tests.sources.olr.processes import service_log, start_run, stop
from tests.sources.olr.service import raw_column, transactions, wait_for

pytestmark = pytest.mark.e2e

SAME = ("tx_seq", "op_seq", "c_scn", "c_tm", "xid", "op", "scn", "owner", "table", "obj", "rid", "before", "after",
        "sql")


class Serve:
    """``olr-buffer serve`` of a changefeed, on a free loopback port."""

    def __init__(self, cf, database: str = "ORCL") -> None:
        self.proc = subprocess.Popen([*CLI, "serve", str(cf), "--listen", "127.0.0.1:0", "--database", database,
                                      "--log-format", "json", "--poll-interval", "0.05"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.port: int | None = None
        self.lines: list[str] = []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                if self.port is None:
                    try:
                        doc = json.loads(line)
                    except ValueError:
                        continue
                    if "listen" in doc:
                        self.port = int(doc["listen"].rpartition(":")[2])
                        ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(60) and self.port, "serve did not start:\n" + "".join(self.lines)


def test_redo_files_through_serve_to_run_olr_give_the_same_changefeed(tmp_path):
    sim = subprocess.run([*CLI, "simulate", str(tmp_path / "in"), "--threads", "3", "--transactions", "600",
                          "--seed", "35", "--large-tx-rows", "3000", "--start-time", "2024-06-01T00:00:00Z"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert sim.returncode == 0, sim.stderr
    expected = max(r["tx_seq"] for r in expected_changefeed(tmp_path / "in").rows) + 1
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    redo = start_run(str(tmp_path / "in"), tmp_path / "a")
    serve = None
    olr = None
    try:
        # A grows while serve streams it and B receives
        wait_for(lambda: transactions(tmp_path / "a" / "cf") > 0 or redo.poll() is not None, 120, "A's first file")
        assert redo.poll() is None, service_log(tmp_path / "a")
        serve = Serve(tmp_path / "a" / "cf")
        olr = start_run(f"olr://127.0.0.1:{serve.port}/ORCL", tmp_path / "b")

        wait_for(lambda: transactions(tmp_path / "a" / "cf") == expected or redo.poll() is not None, 180,
                 "A holding every transaction of the input")
        wait_for(lambda: transactions(tmp_path / "b" / "cf") == expected or olr.poll() is not None, 180,
                 "B holding every transaction of A")
    finally:
        codes = {}
        for name, proc in (("olr", olr), ("serve", serve.proc if serve else None), ("redo", redo)):
            if proc is not None:
                codes[name] = stop(proc) if proc.poll() is None else proc.returncode
    assert codes == {"olr": 0, "serve": 0, "redo": 0}, (codes, service_log(tmp_path / "b"))
    a = load_changefeed(tmp_path / "a" / "cf")
    b = load_changefeed(tmp_path / "b" / "cf")
    assert len(a) == len(b) and len(a) > 3000
    for i, (x, y) in enumerate(zip(a, b)):
        for column in SAME:
            assert x[column] == y[column], f"row {i} (tx_seq {x['tx_seq']}): {column} {y[column]!r} != {x[column]!r}"
        assert y["sub"] == 0 and y["thread"] == 1, y
        assert y["tm"] == (x["tm"] if x["tm"] is not None else x["c_tm"]), (i, x["tm"], x["c_tm"], y["tm"])
    assert {x["thread"] for x in a} == {1, 2, 3}, "A is RAC: its threads do not travel"
    for column in ("before", "after"):
        assert raw_column(tmp_path / "b" / "cf", column) == raw_column(tmp_path / "a" / "cf", column)
    check_changefeed_layout(tmp_path / "b" / "cf")

