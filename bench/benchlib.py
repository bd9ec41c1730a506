"""Helpers shared by the benchmark programs of ``bench/`` (not part of the package).

* :func:`prepare_input` writes (or reuses) a simulated input directory and remembers what
  it holds in ``_bench_input.json`` beside the log files (the reader ignores other files);
* :func:`run_measured` runs a child process and returns its wall time and its own peak
  RSS (``os.wait4`` in a small launcher process gives the rusage of exactly that child:
  several measurements in one parent do not mix, as with ``RUSAGE_CHILDREN``, and the
  parent's own size does not leak into the child's ``ru_maxrss``);
* :func:`wait_quiet` waits until the machine is not busy with other work
  (``OLR_BENCH_NO_WAIT=1``: not at all, for the smoke runs of tests/test_bench_scripts.py);
* :func:`warm_cache` reads the input once so every contender starts from the page cache;
* :func:`machine_info` describes the machine for docs/performance.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
MARKER = "_bench_input.json"
LOG_RE = re.compile(r"^redo_([0-9]+)_([0-9]+)\.jsonl(\.zst)?$")

# About one million input records (lines, lwn included) with three threads and seed 1.
DEFAULT_TRANSACTIONS = 86_000
DEFAULT_THREADS = 3
DEFAULT_SEED = 1
LARGE_TX_ROWS = 1_500_000


# ---------------------------------------------------------------------------------------
# Input


def log_files(input_dir: str | os.PathLike[str]) -> dict[int, list[Path]]:
    """The redo log files of ``input_dir`` per thread, in sequence order."""
    found: dict[int, list[tuple[int, Path]]] = {}
    for p in Path(input_dir).iterdir():
        m = LOG_RE.match(p.name)
        if m:
            found.setdefault(int(m.group(1)), []).append((int(m.group(2)), p))
    return {t: [p for _, p in sorted(v)] for t, v in sorted(found.items())}


def count_lines(input_dir: str | os.PathLike[str]) -> int:
    """Records in the input (every line, ``lwn`` included)."""
    import zstandard

    n = 0
    for files in log_files(input_dir).values():
        for p in files:
            if p.suffix == ".zst":
                with zstandard.open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        n += chunk.count(b"\n")
            else:
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        n += chunk.count(b"\n")
    return n


def input_bytes(input_dir: str | os.PathLike[str]) -> int:
    return sum(p.stat().st_size for files in log_files(input_dir).values() for p in files)


def is_plain(input_dir: str | os.PathLike[str]) -> bool:
    return all(p.suffix == ".jsonl" for files in log_files(input_dir).values() for p in files)


def prepare_input(
    path: str | os.PathLike[str],
    *,
    transactions: int = DEFAULT_TRANSACTIONS,
    threads: int = DEFAULT_THREADS,
    seed: int = DEFAULT_SEED,
    large_tx_rows: int = 0,
    compress: bool = False,
    quiet: bool = False,
) -> dict:
    """Simulate a workload into ``path`` unless it already holds this very one.

    ``compress=False`` (the default here) writes every sequence as plain ``.jsonl``, so the
    pyarrow floor and the naive buffer read the same bytes as the replay, and nobody's
    timing includes decompression. Returns the description stored in the marker file.
    """
    params = {
        "transactions": transactions,
        "threads": threads,
        "seed": seed,
        "large_tx_rows": large_tx_rows,
        "compress": compress,
    }
    marker = Path(path) / MARKER
    if marker.exists():
        desc = json.loads(marker.read_text())
        if desc.get("params") == params:
            if not quiet:
                print(f"input {path}: reusing {desc['lines']:,} records ({desc['bytes'] / 1e6:,.0f} MB)", flush=True)
            return desc
    from olr_buffer.simulate import simulate

    if not quiet:
        print(f"input {path}: simulating {params} ...", flush=True)
    t = time.monotonic()
    stats = simulate(
        path,
        threads=threads,
        transactions=transactions,
        seed=seed,
        large_tx_rows=large_tx_rows,
        compress_archived=compress,
        overwrite=True,
    )
    seconds = time.monotonic() - t
    desc = {
        "params": params,
        "lines": count_lines(path),
        "bytes": input_bytes(path),
        "files": stats.files,
        "simulate_seconds": round(seconds, 1),
        "stats": asdict(stats),
    }
    marker.write_text(json.dumps(desc, indent=2))
    if not quiet:
        print(f"input {path}: {desc['lines']:,} records, {desc['bytes'] / 1e6:,.0f} MB in {seconds:.0f}s", flush=True)
    return desc


def describe_input(path: str | os.PathLike[str]) -> dict:
    """The marker's description, or a fresh count for an input made elsewhere."""
    marker = Path(path) / MARKER
    if marker.exists():
        return json.loads(marker.read_text())
    return {"params": None, "lines": count_lines(path), "bytes": input_bytes(path), "stats": None}


def decompressed_copy(input_dir: str, out_dir: str) -> str:
    """A copy of ``input_dir`` with every ``.jsonl.zst`` decompressed (done before any
    timing starts). Returns ``out_dir``."""
    import zstandard

    os.makedirs(out_dir, exist_ok=True)
    for files in log_files(input_dir).values():
        for p in files:
            if p.suffix == ".zst":
                dst = Path(out_dir) / p.name[: -len(".zst")]
                with zstandard.open(p, "rb") as src, open(dst, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            else:
                shutil.copyfile(p, Path(out_dir) / p.name)
    return out_dir


def warm_cache(input_dir: str | os.PathLike[str]) -> None:
    """Read every log file once, so that each contender starts from the page cache."""
    for files in log_files(input_dir).values():
        for p in files:
            with open(p, "rb") as fh:
                while fh.read(1 << 22):
                    pass


def fresh_dir(path: str | os.PathLike[str]) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return os.fspath(path)


def fsync_path(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------
# Measuring a child process


@dataclass
class Measured:
    cmd: list[str]
    returncode: int
    wall: float
    peak_rss: int  # bytes, of this child alone (ru_maxrss)
    user: float
    sys: float
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)
    other_cpu: float = 0.0  # CPU seconds used by other processes of the machine meanwhile
    steal: float = 0.0  # CPU seconds the hypervisor took meanwhile

    def check(self) -> Measured:
        if self.returncode != 0:
            raise RuntimeError(f"{' '.join(self.cmd)} exited {self.returncode}:\n{self.stderr[-4000:]}")
        return self

    def last_json(self) -> dict:
        """The last line of stdout that is a JSON object (or the whole stdout)."""
        text = self.stdout.strip()
        try:
            return json.loads(text)
        except ValueError:
            pass
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise ValueError(f"no JSON in the output of {' '.join(self.cmd)}")

    def figures(self) -> dict:
        return {
            "wall": self.wall,
            "peak_rss": self.peak_rss,
            "cpu_user": self.user,
            "cpu_sys": self.sys,
            "other_cpu": self.other_cpu,
            "steal": self.steal,
        }


# A small launcher between us and the measured program. Linux keeps, in a process's
# ru_maxrss, the RSS of the memory it had before exec: a child forked (or vforked) from
# a big parent reports at least the parent's RSS. The launcher is a bare interpreter
# (about 10 MiB), so the measured program's ru_maxrss is its own (or 10 MiB at least).
_LAUNCHER = """
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
with open(out, "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "wall": wall, "maxrss_kib": ru.ru_maxrss,
               "user": ru.ru_utime, "sys": ru.ru_stime}, fh)
"""


def _cpu_times() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / hz, steal / hz


def machine_busy(seconds: float = 1.0) -> float:
    """Share of the machine's CPUs busy (steal included) over ``seconds``."""
    b0, s0 = _cpu_times()
    time.sleep(seconds)
    b1, s1 = _cpu_times()
    return ((b1 - b0) + (s1 - s0)) / (seconds * (os.cpu_count() or 1))


def wait_quiet(threshold: float = 0.15, max_wait: float = 600.0, quiet: bool = False) -> float:
    """Wait (up to ``max_wait`` s) until less than ``threshold`` of the CPUs are busy: other
    people's test runs on the same machine would skew every figure. Returns the wait.
    ``OLR_BENCH_NO_WAIT=1`` in the environment: no wait (a run that checks a program
    works, not one that measures)."""
    if os.environ.get("OLR_BENCH_NO_WAIT") == "1":
        return 0.0
    t = time.monotonic()
    said = False
    while True:
        busy = machine_busy(1.0)
        waited = time.monotonic() - t
        if busy < threshold or waited >= max_wait:
            if said and not quiet:
                print(f"  (machine quiet after {waited:.0f}s, {busy:.0%} busy)", file=sys.stderr, flush=True)
            return waited
        if not said and not quiet:
            print(
                f"  (machine {busy:.0%} busy with other work: waiting for it to calm down)", file=sys.stderr, flush=True
            )
            said = True
        time.sleep(2.0)


def run_measured(cmd: list[str], *, cwd: str | None = None, env: dict | None = None) -> Measured:
    """Run ``cmd``; wall time from fork to exit, the child's own peak RSS and CPU time, and
    the CPU time the rest of the machine used meanwhile (a sign of interference)."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile(suffix=".json") as res,
    ):
        b0, s0 = _cpu_times()
        proc = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCHER, res.name, *cmd], stdout=out, stderr=err, cwd=cwd, env=env
        )
        b1, s1 = _cpu_times()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        try:
            r = json.loads(open(res.name).read())
        except ValueError:
            raise RuntimeError(f"launcher failed ({proc.returncode}): {stderr[-2000:]}") from None
        return Measured(
            cmd=cmd,
            returncode=r["rc"],
            wall=r["wall"],
            peak_rss=r["maxrss_kib"] * 1024,  # Linux: KiB
            user=r["user"],
            sys=r["sys"],
            stdout=stdout,
            stderr=stderr,
            other_cpu=max(0.0, (b1 - b0) - r["user"] - r["sys"]),
            steal=s1 - s0,
        )


def python_cmd(script: str, *args: str) -> list[str]:
    """``python bench/<script> args...`` with this interpreter."""
    return [sys.executable, str(BENCH_DIR / script), *args]


def replay_cmd(input_dir: str, work: str, *, durable: bool = True) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        input_dir,
        "--queue",
        os.path.join(work, "queue"),
        "--changefeed",
        os.path.join(work, "changefeed"),
        "--json",
        "--no-progress",
    ]
    if not durable:
        cmd.append("--no-sync")
    return cmd


def measure_replay(input_dir: str, work: str, *, durable: bool = True) -> tuple[Measured, dict]:
    """One ``olr-buffer replay`` from scratch (empty queue and changefeed) in a child."""
    fresh_dir(work)
    warm_cache(input_dir)
    wait_quiet()
    m = run_measured(replay_cmd(input_dir, work, durable=durable)).check()
    return m, m.last_json()


# ---------------------------------------------------------------------------------------
# The machine


def machine_info(work: str | None = None) -> dict:
    info: dict = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu"] = m.group(1).strip() if m else platform.processor()
        m = re.search(r"^cpu MHz\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            info["cpu_mhz"] = float(m.group(1))
    except OSError:
        info["cpu"] = platform.processor()
    try:
        meminfo = Path("/proc/meminfo").read_text()
        m = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.M)
        if m:
            info["ram_gib"] = round(int(m.group(1)) / 2**20, 1)
    except OSError:
        pass
    where = work or tempfile.gettempdir()
    try:
        df = subprocess.run(["df", "-PT", where], capture_output=True, text=True).stdout.splitlines()[-1].split()
        info["disk"] = {"device": df[0], "fs": df[1], "size_gib": round(int(df[2]) / 2**20), "path": where}
        dev = os.path.basename(df[0])
        base = re.sub(r"p?[0-9]+$", "", dev) if not os.path.exists(f"/sys/block/{dev}") else dev
        rot = Path(f"/sys/block/{base}/queue/rotational")
        if rot.exists():
            info["disk"]["rotational"] = rot.read_text().strip() == "1"
    except (OSError, IndexError, ValueError):
        pass
    info["fsync_ms"] = round(fsync_latency(where) * 1e3, 2)
    versions = {}
    for mod in ("pyarrow", "lmdb", "zstandard", "orjson", "diskcache", "persistqueue", "psutil"):
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError:
            versions[mod] = None
    import sqlite3

    versions["sqlite"] = sqlite3.sqlite_version
    info["versions"] = versions
    return info


def fsync_latency(where: str, n: int = 100) -> float:
    """Mean seconds of a 200-byte write + fsync in ``where``: the price of one durable commit."""
    fd, path = tempfile.mkstemp(dir=where, prefix=".fsync-probe-")
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, b"x" * 200)
            os.fsync(fd)
        return (time.perf_counter() - t) / n
    finally:
        os.close(fd)
        os.unlink(path)


# ---------------------------------------------------------------------------------------
# Printing


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def print_json(obj: dict) -> None:
    print(json.dumps(obj, default=str), flush=True)


def redo_source(queue, input_dir: str, processes: bool = False):
    """The redo-file source of ``input_dir`` appending to ``queue``, prepared (its readers
    made, restored from the queue), not started."""
    from olr_buffer.changes import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS
    from olr_buffer.sources.base import SourceSettings
    from olr_buffer.sources.redo import RedoSource

    source = RedoSource(
        input_dir, queue, SourceSettings(DEFAULT_BLOCK_RECORDS, DEFAULT_BLOCK_BYTES, processes=processes)
    )
    source.prepare(None, queue.meta_items(source.state_prefix))
    return source


def read_source(source) -> None:
    """Run every reader of ``source`` (offline) in a thread of its own, as ``replay``
    does, until each has read its input to the end; the first error is raised."""
    import threading

    errors: list[BaseException] = []

    def run(reader) -> None:
        try:
            reader.run()
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,), name=r.name) for r in source.readers(False, 0.1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
