"""The changefeed writer on an Iceberg changefeed: reopened, it reads which files make the
changefeed (its recovery) and commits to the table through one catalog, opened once."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import ChangefeedWriter


def _publish(writer: ChangefeedWriter, scn: int) -> None:
    row = [2, scn, 0, 1, scn, None, "O", "T", None, f"R{scn}", None, '{"A":1}', None]
    assert writer.write_transaction(Commit(f"x{scn}", CommitKey(scn, 1, 1, scn), None), [(1, [row])]) == 1
    writer.flush()


def test_a_reopened_writer_opens_the_catalog_once(tmp_path: Path, monkeypatch) -> None:
    cf = tmp_path / "cf"
    first = ChangefeedWriter(cf, durable=False, table_format="iceberg")
    _publish(first, 10)
    first.close()
    opened: list[str] = []
    real = SqlCatalog.__init__

    def counted(self, name, **properties):
        opened.append(properties["uri"])
        real(self, name, **properties)

    monkeypatch.setattr(SqlCatalog, "__init__", counted)
    reopened = ChangefeedWriter(cf, durable=False)
    assert reopened.table_format == "iceberg"
    _publish(reopened, 20)
    reopened.close()
    assert opened == [f"sqlite:///{cf}/_iceberg/catalog.db"]
    monkeypatch.undo()
    table = SqlCatalog("olr_buffer", uri=opened[0]).load_table("olr_buffer.changefeed")
    assert sorted(table.scan(selected_fields=("scn",)).to_arrow().column("scn").to_pylist()) == [10, 20]
