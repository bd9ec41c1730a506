"""A published changefeed file is synced to the disk exactly once, before its name
appears: a second fsync of a clean file still costs a device flush as long as the first,
on the way of every commit to the changefeed's readers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import ChangefeedWriter


def _publish(writer: ChangefeedWriter, scn: int) -> None:
    row = [2, scn, 0, 1, scn, None, "O", "T", None, f"R{scn}", None, '{"A":1}', None]
    assert writer.write_transaction(Commit(f"x{scn}", CommitKey(scn, 1, 1, scn), None), [(1, [row])]) == 1
    writer.flush()


@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_a_published_file_is_fsynced_once_before_it_is_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str
) -> None:
    events: list[tuple[str, ...]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def link(src, dst, *args, **kwargs) -> None:
        events.append(("link", os.path.realpath(src), os.path.realpath(dst)))
        real_link(src, dst, *args, **kwargs)

    writer = ChangefeedWriter(tmp_path / "cf", table_format=table_format)  # durable, the default
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    for scn in (100, 200):
        events.clear()
        _publish(writer, scn)
        (linked,) = [e for e in events if e[0] == "link" and e[2].endswith(".parquet")]
        synced = [i for i, e in enumerate(events) if e == ("fsync", linked[1])]
        assert len(synced) == 1, f"the file was fsynced {len(synced)} times: {events}"
        assert synced[0] < events.index(linked)
    monkeypatch.undo()
    writer.close()
    assert sorted(p.name for p in (tmp_path / "cf").glob("part-*.parquet")) == [
        "part-00000000000000000000-00000000000000000000.parquet",
        "part-00000000000000000001-00000000000000000001.parquet",
    ]
