"""Schema versions in the changefeed writer: a row's ``schema_version``, the documents in
``_olr_buffer/schemas/`` (written before the file whose rows name them is visible, never
changed), the current version of a table for rows that name none, recovered from the
footers after a restart, dropped with an abandoned file, and kept by compaction."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from olr_buffer.changes import DDL, INSERT, Commit, CommitKey, SchemaColumn, schema_document, schema_fields
from olr_buffer.sinks.parquet import ChangefeedCorruptError, ChangefeedError, ChangefeedWriter, compact
from olr_buffer.sinks.parquet import writer as writer_module

V1, DOC1 = schema_document("redo", "O", "T", [SchemaColumn("A", "NUMBER(5)", False, "decimal(5,0)")])
V2, DOC2 = schema_document(
    "redo",
    "O",
    "T",
    [SchemaColumn("A", "NUMBER(5)", False, "decimal(5,0)"), SchemaColumn("B", "VARCHAR2(10)", True, "string")],
)
VP, DOCP = schema_document("postgresql", "public", "p", [SchemaColumn("id", "integer", False, "int")], ["id"])


def dml(table: str = "T", owner: str = "O", *fields) -> list:
    return [INSERT, 1, 0, 1, 1, None, owner, table, None, "r", None, '{"A":1}', None, *fields]


def ddl(version: str, document: str) -> list:
    return [DDL, 1, 0, 1, 1, None, "O", "T", None, None, None, None, "alter table t", *schema_fields(version, document)]


def tx(w: ChangefeedWriter, n: int, *rows: list) -> None:
    w.write_transaction(Commit(f"x{n}", CommitKey(10 * n, 1, 1, n), None), [(1, list(rows))])


def versions(cf: Path) -> list:
    return [
        (r["tx_seq"], r["owner"], r["table"], r["schema_version"])
        for p in sorted(cf.glob("part-*.parquet"))
        for r in pq.read_table(p).to_pylist()
    ]


def test_rows_take_their_tables_version_across_files_and_restarts(tmp_path):
    cf = tmp_path / "cf"
    w = ChangefeedWriter(cf, durable=False)
    tx(w, 0, dml())  # before any document: no version
    tx(w, 1, ddl(V1, DOC1), dml(), dml("U"))
    w.flush()
    tx(w, 2, dml())
    w.close()
    # a restart: the version of O.T comes from the footers
    w = ChangefeedWriter(cf, durable=False)
    tx(w, 3, dml(), ddl(V2, DOC2), dml())
    tx(w, 4, dml("p", "public", *schema_fields(VP, DOCP)), dml("p", "public", VP), dml())
    w.close()
    assert versions(cf) == [
        (0, "O", "T", None),
        (1, "O", "T", V1),
        (1, "O", "T", V1),
        (1, "O", "U", None),
        (2, "O", "T", V1),
        (3, "O", "T", V1),
        (3, "O", "T", V2),
        (3, "O", "T", V2),
        (4, "public", "p", VP),
        (4, "public", "p", VP),
        (4, "O", "T", V2),
    ]
    docs = cf / "_olr_buffer" / "schemas"
    assert sorted(p.name for p in docs.iterdir()) == sorted(f"{v}.json" for v in (V1, V2, VP))
    assert (docs / f"{V2}.json").read_text() == DOC2
    assert oct(docs.stat().st_mode & 0o777) == "0o700" and oct((docs / f"{V1}.json").stat().st_mode & 0o777) == "0o600"
    footers = [pq.read_metadata(p).metadata.get(b"olr_buffer.schemas") for p in sorted(cf.glob("part-*.parquet"))]
    assert [orjson.loads(f) if f else None for f in footers] == [
        [["O", "T", V1]],
        None,
        [["O", "T", V2], ["public", "p", VP]],
    ]


def test_documents_are_on_disk_before_the_file_that_names_them_is_visible(tmp_path, monkeypatch):
    cf = tmp_path / "cf"
    seen = []
    real = writer_module.write_schema_documents

    def spy(path, documents, durable):
        seen.append((sorted(documents), sorted(p.name for p in cf.glob("part-*.parquet"))))
        real(path, documents, durable)

    monkeypatch.setattr(writer_module, "write_schema_documents", spy)
    w = ChangefeedWriter(cf, durable=True)
    tx(w, 0, ddl(V1, DOC1), dml())
    w.flush()
    tx(w, 1, ddl(V1, DOC1), dml())  # known already: not written again (no call at all)
    w.close()
    assert seen == [([V1], [])]
    assert (cf / "part-00000000000000000001-00000000000000000001.parquet").exists()


def test_an_abandoned_file_takes_its_versions_with_it(tmp_path):
    cf = tmp_path / "cf"
    w = ChangefeedWriter(cf, durable=False, row_group_rows=1)
    tx(w, 0, ddl(V1, DOC1))
    w.flush()
    tx(w, 1, ddl(V2, DOC2), dml())  # in row groups of the open file, then dropped
    w.abandon()
    tx(w, 1, dml())
    w.close()
    assert versions(cf) == [(0, "O", "T", V1), (1, "O", "T", V1)]
    assert not (cf / "_olr_buffer" / "schemas" / f"{V2}.json").exists()


def test_a_version_without_its_document_or_with_another_is_refused(tmp_path):
    w = ChangefeedWriter(tmp_path / "cf", durable=False)
    tx(w, 0, dml("p", "public", VP))
    with pytest.raises(ChangefeedError, match=f"rows name schema version\\(s\\) {VP} whose document no row carried"):
        w.flush()
    w.abandon()
    tx(w, 0, dml("p", "public", V1, DOCP))
    with pytest.raises(
        ChangefeedError, match=f"names schema version {V1}, but the document it carries has version {VP}"
    ):
        w.flush()
    w.release()


def test_a_missing_document_named_by_a_footer_is_refused_on_open(tmp_path):
    cf = tmp_path / "cf"
    w = ChangefeedWriter(cf, durable=False)
    tx(w, 0, ddl(V1, DOC1))
    w.close()
    os.unlink(cf / "_olr_buffer" / "schemas" / f"{V1}.json")
    with pytest.raises(ChangefeedCorruptError, match=f"schema document\\(s\\) missing from _olr_buffer/schemas/: {V1}"):
        ChangefeedWriter(cf, durable=False)


def test_compaction_keeps_versions_documents_and_footers(tmp_path):
    cf, out = tmp_path / "cf", tmp_path / "out"
    w = ChangefeedWriter(cf, durable=False, file_rows=1)
    tx(w, 0, ddl(V1, DOC1))
    tx(w, 1, dml())
    tx(w, 2, ddl(V2, DOC2))
    tx(w, 3, dml())
    w.close()
    before = versions(cf)
    compact(cf, output=out, target_rows=10, durable=False)
    assert versions(out) == before
    assert sorted(p.name for p in (out / "_olr_buffer" / "schemas").iterdir()) == sorted([f"{V1}.json", f"{V2}.json"])
    (merged,) = out.glob("part-*.parquet")
    assert orjson.loads(pq.read_metadata(merged).metadata[b"olr_buffer.schemas"]) == [["O", "T", V2]]
    compact(cf, in_place=True, no_reader_running=True, target_rows=10, durable=False)
    assert versions(cf) == before
    for path in (cf, out):  # a writer opened on either goes on with O.T at V2
        w = ChangefeedWriter(path, durable=False)
        tx(w, 4, dml())
        w.close()
        assert versions(path)[-1] == (4, "O", "T", V2)


def test_compaction_gives_files_written_before_the_column_a_null_one(tmp_path):
    cf, out = tmp_path / "cf", tmp_path / "out"
    w = ChangefeedWriter(cf, durable=False, file_rows=1)
    tx(w, 0, dml())
    tx(w, 1, ddl(V1, DOC1), dml())
    w.close()
    first = sorted(cf.glob("part-*.parquet"))[0]
    old = pq.read_table(first).drop_columns(["schema_version"])  # as an earlier version wrote it
    pq.write_table(old.replace_schema_metadata(pq.read_metadata(first).metadata), first)
    compact(cf, output=out, target_rows=10, durable=False)
    assert versions(out) == [(0, "O", "T", None), (1, "O", "T", V1), (1, "O", "T", V1)]
