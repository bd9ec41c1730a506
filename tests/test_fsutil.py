"""The durable file helpers (olr_buffer/fsutil.py), on real files: a replaced file holds
the new content or the old one, the temporary file never stays, and the durable steps
happen in their order (file fsynced, renamed, directory fsynced), as ``strace`` sees them."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from olr_buffer import fsutil


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_replaces_the_file_whole_with_the_mode_asked(tmp_path):
    path = tmp_path / "doc.json"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    fsutil.atomic_write(str(path), b"new content", durable=True, mode=0o600)
    assert path.read_bytes() == b"new content"
    assert _mode(path) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["doc.json"]


def test_atomic_write_with_its_own_temporary_name(tmp_path):
    path = tmp_path / "doc"
    fsutil.atomic_write(str(path), b"x" * 10, durable=False, tmp=str(tmp_path / ".doc.tmp"))
    assert path.read_bytes() == b"x" * 10
    assert os.listdir(tmp_path) == ["doc"]


def test_a_failed_write_leaves_the_old_file_intact_and_no_temporary_file(tmp_path):
    """The write of the new content fails half way (the file size limit: EFBIG, a real
    short write as a full disk gives): the old file is untouched, the temporary removed."""
    path = tmp_path / "doc.json"
    path.write_bytes(b"the old content")
    script = textwrap.dedent(f"""
        import errno, resource, signal
        from olr_buffer import fsutil
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            fsutil.atomic_write({str(path)!r}, b"n" * 100_000, durable=True)
        except OSError as exc:
            assert exc.errno == errno.EFBIG, exc
            print("failed", exc.errno)
        else:
            print("written")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["failed", str(errno.EFBIG)]
    assert path.read_bytes() == b"the old content"
    assert os.listdir(tmp_path) == ["doc.json"]


def test_a_temporary_file_that_cannot_be_created_leaves_the_old_file(tmp_path):
    path = tmp_path / "doc"
    path.write_bytes(b"old")
    (tmp_path / "doc.tmp").mkdir()  # in the way of the temporary file
    with pytest.raises(IsADirectoryError):
        fsutil.atomic_write(str(path), b"new", durable=True)
    assert path.read_bytes() == b"old"


def test_write_file_exclusive_never_overwrites(tmp_path):
    path = tmp_path / "obj"
    fsutil.write_file(str(path), b"first", durable=True, mode=0o640, exclusive=True)
    assert _mode(path) == 0o640
    with pytest.raises(FileExistsError):
        fsutil.write_file(str(path), b"second", durable=True, mode=0o640, exclusive=True)
    assert path.read_bytes() == b"first"
    fsutil.write_file(str(path), b"2", durable=False)  # not exclusive: truncated and written
    assert path.read_bytes() == b"2"


def test_open_with_mode_corrects_the_mode_of_an_existing_file(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"")
    os.chmod(path, 0o666)
    os.close(fsutil.open_with_mode(str(path), os.O_WRONLY | os.O_APPEND, 0o600))
    assert _mode(path) == 0o600


def test_write_all_writes_every_byte(tmp_path):
    data = os.urandom(3 << 20)
    fd = os.open(tmp_path / "big", os.O_WRONLY | os.O_CREAT)
    try:
        fsutil.write_all(fd, data)
    finally:
        os.close(fd)
    assert (tmp_path / "big").read_bytes() == data


def test_fsync_dir_syncs_a_directory_and_refuses_a_file(tmp_path):
    fsutil.fsync_dir(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x")
    fsutil.fsync_file(str(tmp_path / "f"))
    with pytest.raises(NotADirectoryError):
        fsutil.fsync_dir(str(tmp_path / "f"))
    with pytest.raises(FileNotFoundError) as err:
        fsutil.fsync_file(str(tmp_path / "missing"))
    assert err.value.filename == str(tmp_path / "missing")


def test_a_durable_replace_fsyncs_the_file_then_renames_then_fsyncs_the_directory(tmp_path):
    """Seen from outside the process (strace, the real system calls): the temporary file's
    data is on the device before the rename, and the directory holding the new name after."""
    strace = shutil.which("strace")
    assert strace, "this test needs strace (apt-get install strace)"
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / "doc.json"
    trace = tmp_path / "trace"
    script = f"from olr_buffer import fsutil; fsutil.atomic_write({str(path)!r}, b'new', durable=True)"
    out = subprocess.run(
        [
            strace,
            "-f",
            "-y",
            "-o",
            str(trace),
            "-e",
            "trace=fsync,rename,renameat,renameat2",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    calls = [line.split(None, 1)[1] for line in trace.read_text().splitlines() if str(folder) in line]
    steps = []
    for call in calls:
        if call.startswith("fsync(") and f"<{path}.tmp>" in call:
            steps.append("fsync file")
        elif call.startswith("rename") and "= 0" in call:
            steps.append("rename")
        elif call.startswith("fsync(") and f"<{folder}>" in call:
            steps.append("fsync directory")
    assert steps == ["fsync file", "rename", "fsync directory"], calls
    assert path.read_bytes() == b"new"


def test_without_durable_nothing_is_fsynced(tmp_path):
    strace = shutil.which("strace")
    assert strace, "this test needs strace (apt-get install strace)"
    path = tmp_path / "doc"
    trace = tmp_path / "trace"
    script = f"from olr_buffer import fsutil; fsutil.atomic_write({str(path)!r}, b'new', durable=False)"
    out = subprocess.run(
        [strace, "-f", "-y", "-o", str(trace), "-e", "trace=fsync,fdatasync", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert not [line for line in trace.read_text().splitlines() if str(tmp_path) in line]
    assert path.read_bytes() == b"new"
