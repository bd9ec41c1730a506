"""What every store promises (olr_buffer/store/base.py), checked on a local directory and
on S3 (moto's server) alike."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from olr_buffer.store import (
    ObjectChangedError,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    StoreError,
    is_remote,
    open_store,
)


def parquet_bytes(first: int, n: int) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"tx_seq": pa.array(range(first, first + n), pa.int64())}), sink)
    return sink.getvalue().to_pybytes()


def test_create_then_read_list_and_stat(store):
    info = store.create("part-a.parquet", b"hello")
    assert (info.name, info.size) == ("part-a.parquet", 5)
    store.create("_olr_buffer/manifest.json", b"{}")
    store.create("_delta_log/00000000000000000000.json", b"{}\n")
    assert store.read("part-a.parquet") == b"hello"
    assert store.stat("part-a.parquet").size == 5
    assert store.exists("part-a.parquet") and not store.exists("part-b.parquet")
    assert [(o.name, o.size) for o in store.list()] == [("part-a.parquet", 5)]
    assert [o.name for o in store.list("_delta_log/")] == ["_delta_log/00000000000000000000.json"]
    assert [o.name for o in store.list(recursive=True)] == [
        "_delta_log/00000000000000000000.json",
        "_olr_buffer/manifest.json",
        "part-a.parquet",
    ]
    assert [o.name for o in store.list("part-")] == ["part-a.parquet"]
    assert store.list("nothing-") == []


def test_a_missing_root_lists_nothing(store_uri):
    assert open_store(store_uri + "/not-there").list(recursive=True) == []


def test_create_never_overwrites(store):
    store.create("part-a.parquet", b"first")
    with pytest.raises(ObjectExistsError, match="already exists"):
        store.create("part-a.parquet", b"second")
    assert store.read("part-a.parquet") == b"first"


def test_create_from_file_never_overwrites(store, tmp_path):
    src = tmp_path / "local.parquet"
    src.write_bytes(parquet_bytes(0, 10))
    info = store.create_from_file("part-0.parquet", src)
    assert info.size == src.stat().st_size
    other = tmp_path / "other.parquet"
    other.write_bytes(b"not this")
    with pytest.raises(ObjectExistsError):
        store.create_from_file("part-0.parquet", other)
    assert store.read("part-0.parquet") == src.read_bytes()


def test_concurrent_creates_of_one_name_have_one_winner(store):
    results: list[str] = []

    def create(i: int) -> None:
        try:
            store.create("part-x.parquet", f"writer {i}".encode())
            results.append(f"ok {i}")
        except ObjectExistsError:
            results.append("exists")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.startswith("ok")]
    assert len(winners) == 1 and results.count("exists") == 7
    assert store.read("part-x.parquet") == f"writer {winners[0].split()[1]}".encode()


def test_read_range_and_missing_objects(store):
    store.create("blob", bytes(range(256)))
    assert store.read_range("blob", 10, 5) == bytes(range(10, 15))
    assert store.read_range("blob", 250, 100) == bytes(range(250, 256))
    assert store.read_range("blob", 300, 10) == b""
    for call in (lambda: store.read("nope"), lambda: store.stat("nope"), lambda: store.read_versioned("nope")):
        with pytest.raises(ObjectNotFoundError, match="nope"):
            call()


def test_open_input_reads_a_parquet_footer_and_the_file(store):
    data = parquet_bytes(5, 1000)
    store.create("part-5.parquet", data)
    with store.open_input("part-5.parquet") as f:
        meta = pq.read_metadata(f)
    assert meta.num_rows == 1000
    with store.open_input("part-5.parquet") as f:
        assert pq.read_table(f).column("tx_seq").to_pylist() == list(range(5, 1005))


def test_replace_and_replace_if(store):
    first = store.replace("_olr_buffer/lease.json", b"one")
    assert store.read("_olr_buffer/lease.json") == b"one"
    current = store.read_versioned("_olr_buffer/lease.json")
    assert current.data == b"one" and current.etag == first.etag
    second = store.replace_if("_olr_buffer/lease.json", b"two", current.etag)
    assert second.etag != current.etag
    with pytest.raises(ObjectChangedError):
        store.replace_if("_olr_buffer/lease.json", b"three", current.etag)  # stale version
    assert store.read("_olr_buffer/lease.json") == b"two"
    store.replace("_olr_buffer/lease.json", b"four")  # unconditional
    assert store.read("_olr_buffer/lease.json") == b"four"
    with pytest.raises(ObjectNotFoundError):
        store.replace_if("_olr_buffer/gone.json", b"x", second.etag)
    assert not store.exists("_olr_buffer/gone.json")


def test_concurrent_replace_if_has_one_winner(store):
    base = store.replace("doc", b"base")
    results: list[str] = []

    def swap(i: int) -> None:
        try:
            store.replace_if("doc", f"by {i}".encode(), base.etag)
            results.append("ok")
        except ObjectChangedError:
            results.append("changed")

    threads = [threading.Thread(target=swap, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["changed"] * 5 + ["ok"]


def test_delete_is_idempotent(store):
    store.create("x", b"1")
    store.delete("x")
    store.delete("x")
    assert not store.exists("x")
    store.create("x", b"2")  # the name is free again
    assert store.read("x") == b"2"


@pytest.mark.parametrize("name", ["../escape", "/abs", "a//b", "a/./b", "", "a\\b"])
def test_names_stay_under_the_root(store, name):
    with pytest.raises(StoreError, match="invalid object name"):
        store.create(name, b"x")


def test_arrow_filesystem_reads_the_objects_as_a_dataset(store):
    store.create("part-0.parquet", parquet_bytes(0, 3))
    store.create("part-3.parquet", parquet_bytes(3, 2))
    store.create("_olr_buffer/manifest.json", b"{}")
    fs, root = store.arrow_filesystem()
    table = ds.dataset(
        root, filesystem=fs, format="parquet", exclude_invalid_files=False, ignore_prefixes=["_", "."]
    ).to_table()
    assert sorted(table.column("tx_seq").to_pylist()) == [0, 1, 2, 3, 4]


def test_delta_location_holds_no_credential(store, store_uri):
    uri, options = store.delta_location()
    assert is_remote(uri) == is_remote(store_uri)
    assert not any("SECRET" in k or "KEY" in k or "TOKEN" in k for k in options)


def test_object_info_is_what_list_gives(store):
    store.create("part-a.parquet", b"abc")
    [info] = store.list()
    assert isinstance(info, ObjectInfo) and (info.name, info.size) == ("part-a.parquet", 3)
