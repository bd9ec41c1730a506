"""``--history``: beside each mirror table, every version of each row once, with validity
ranges in tx_seq and commit time that neither overlap nor leave a gap while the row
exists; its current versions are the mirror table's rows; exactly once across kills."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import DeltaTable

from olr_buffer.mirror import MirrorOptions, mirror

from .test_mirror import make_changefeed, mirror_rows
from .workload import model

KEYS = {"ORDERS": ("ORDER_ID",), "ITEMS": ("ORDER_ID", "LINE_NO")}


def check_history(cf: Path, target: Path) -> None:
    puts: dict = {}
    model(cf, puts)
    for table, key in KEYS.items():
        history = DeltaTable(str(target / "SHOP" / f"{table}__history")).to_pyarrow_table().to_pylist()
        versions = defaultdict(list)
        for v in history:
            versions[tuple(v[k] for k in key)].append(v)
        # every transaction that left a version of a key: one version, once
        assert {k: sorted(v["valid_from_tx_seq"] for v in vs) for k, vs in versions.items()} == {
            k: sorted(txs) for k, txs in puts[table].items() if txs
        }, table
        for k, vs in versions.items():
            vs.sort(key=lambda v: v["valid_from_tx_seq"])
            for a, b in zip(vs, vs[1:]):
                assert (
                    a["valid_to_tx_seq"] is not None
                    and a["valid_from_tx_seq"] < a["valid_to_tx_seq"] <= b["valid_from_tx_seq"]
                ), (table, k)
                assert a["valid_from"] < a["valid_to"] <= b["valid_from"]
        # the open versions are the mirror table's rows
        current = sorted(
            repr({c: v[c] for c in v if not c.startswith("valid_")}) for v in history if v["valid_to_tx_seq"] is None
        )
        rows = sorted(repr({**{c: r[c] for c in r if c != "tx_seq"}}) for r in mirror_rows(target, table))
        assert current == rows, table
        # a version's start is its transaction's commit time
        v = history[0]
        assert isinstance(v["valid_from"], dt.datetime)


@pytest.mark.parametrize("batch_rows", [7, 1_000_000])
def test_history_holds_every_version_once(tmp_path, batch_rows):
    cf = make_changefeed(tmp_path, seed=21)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=batch_rows, history=True))
    check_history(cf, target)
    assert not (target / "SHOP" / "LOG__history").exists()  # no key: no history


@pytest.mark.e2e
@pytest.mark.slow
def test_history_killed_at_each_point_then_rerun(tmp_path):
    cf = make_changefeed(tmp_path, seed=22, transactions=300, file_rows=30)
    target = tmp_path / "mirror"
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "mirror",
        str(cf),
        "--target",
        str(target),
        "--history",
        "--batch-rows",
        "40",
        "--until-caught-up",
    ]
    env = {**{k: v for k, v in os.environ.items() if k != "OLR_BUFFER_FAULT"}, "PYTHONPATH": os.getcwd()}
    killed = 0
    for point in ("mirror_after_history_commit", "mirror_after_commit"):
        for nth in (1, 2, 5):
            done = subprocess.run(
                cmd, capture_output=True, text=True, env={**env, "OLR_BUFFER_FAULT": f"{point}:{nth}"}, timeout=300
            )
            assert done.returncode in (0, -signal.SIGKILL), done.stderr
            killed += done.returncode == -signal.SIGKILL
    assert killed >= 4
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    check_history(cf, target)


def test_history_started_later_begins_with_the_current_rows(tmp_path):
    import shutil

    from olr_buffer.runtime import PipelineOptions, replay

    from .workload import write_workload

    write_workload(tmp_path / "all", 23, 200)
    inp = tmp_path / "in"
    inp.mkdir()
    files = sorted((tmp_path / "all").iterdir())
    shutil.copy(files[0], inp)
    opts = PipelineOptions(file_rows=30, durable=False)
    cf = tmp_path / "cf"
    first = replay(str(inp), str(tmp_path / "q"), str(cf), opts).next_tx_seq
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True))
    before = {r["ORDER_ID"]: r for r in mirror_rows(target, "ORDERS")}
    for f in files[1:]:
        shutil.copy(f, inp)
    replay(str(inp), str(tmp_path / "q"), str(cf), opts)
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, history=True, batch_rows=40))
    history = DeltaTable(str(target / "SHOP" / "ORDERS__history")).to_pyarrow_table().to_pylist()
    seeded = {v["ORDER_ID"]: v for v in history if v["valid_from"] is None}
    assert set(seeded) == set(before)  # every row the mirror held, as its version from its last change
    assert all(v["valid_from_tx_seq"] == before[k]["tx_seq"] < first for k, v in seeded.items())
    current = sorted(
        repr({c: v[c] for c in v if not c.startswith("valid_")}) for v in history if v["valid_to_tx_seq"] is None
    )
    assert current == sorted(repr({c: r[c] for c in r if c != "tx_seq"}) for r in mirror_rows(target, "ORDERS"))
