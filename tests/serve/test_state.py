"""The receiver's stored position: names, atomic writes, one serve per database name."""

from __future__ import annotations

from pathlib import Path

import pytest

from olr_buffer.serve.errors import ServeLockedError, ServeStateError
from olr_buffer.serve.state import Confirmed, StateStore, databases, file_stem, read_confirmed


def test_a_database_name_is_a_safe_file_name_and_comes_back_from_it(tmp_path: Path):
    names = ["ORCL", "orcl.pdb_1-x", "../etc", ".hidden", "Δb/x y", "a%2F"]
    stems = [file_stem(n) for n in names]
    assert stems[:2] == ["ORCL", "orcl.pdb_1-x"]
    assert all("/" not in s and not s.startswith(".") for s in stems) and len(set(stems)) == len(names)
    for n in names:
        StateStore(str(tmp_path), n).save(Confirmed(n, 1, 2, 0, None, 0.0))
    assert databases(str(tmp_path)) == sorted(names)


def test_a_position_is_stored_whole_and_read_back(tmp_path: Path):
    store = StateStore(str(tmp_path / "s"), "ORCL")
    assert store.load() is None
    store.save(Confirmed("ORCL", 10, 3, 4, 99, 1.5, "127.0.0.1:5", "/cf"))
    store.save(Confirmed("ORCL", 11, 0, 5, None, 2.5))
    assert read_confirmed(str(tmp_path / "s"), "ORCL") == Confirmed("ORCL", 11, 0, 5, None, 2.5)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["ORCL.json", "ORCL.lock"]  # no temporary left
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b'{"format": 1, "c_scn": -1, "c_idx": 0}',
        b'{"format": 9}',
        b"[]",
        b'{"format": 1, "database": "ORCL", "c_scn": 5, "c_idx": 18446744073709551616, '
        b'"tx_seq": null, "c_tm": null, "time": 0}',
    ],
)
def test_a_damaged_position_is_an_error_never_taken_for_nothing(tmp_path: Path, content: bytes):
    (tmp_path / "ORCL.json").write_bytes(content)
    with pytest.raises(ServeStateError, match="ORCL.json.*hint: restore the file, or remove it"):
        read_confirmed(str(tmp_path), "ORCL")


def test_one_serve_per_database_name(tmp_path: Path):
    first = StateStore(str(tmp_path), "ORCL")
    StateStore(str(tmp_path), "OTHER").release()  # another database name: its own lock
    with pytest.raises(ServeLockedError, match=r"database 'ORCL' is served by another process \(pid \d+\)"):
        StateStore(str(tmp_path), "ORCL")
    first.release()
    StateStore(str(tmp_path), "ORCL").release()


def test_a_state_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path: Path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ServeStateError, match=r"file/serve: cannot create the serve state directory: Not a directory"):
        StateStore(str(tmp_path / "file" / "serve"), "ORCL")
