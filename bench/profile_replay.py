"""Where `olr-buffer replay`'s time goes, on a ~300k-record workload.

    python bench/profile_replay.py [--transactions 26000] [--work DIR] [--top 25]
                                   [--report FILE] [--no-py-spy] [--json]

Four views, each on the same simulated input (three threads, seed 1, plain .jsonl,
durable):

1. **cProfile of the whole replay, in process** (``olr_buffer.runtime.replay``, default
   options). cProfile sees only the thread that enabled it: the main thread, which runs
   the dispatcher and the changefeed writer. Neither the reader threads nor the reader
   processes (when the pipeline parses in child processes) are in it; time the main
   thread spends waiting for them shows up as lock/event waits. Self time is grouped by
   area (reader, dispatcher, sink, txbuffer, orjson, pyarrow, lmdb, zstd, waiting, ...).
2. **The reader path alone**: every ``ThreadReader.read_to_end`` of the input, one after
   the other in this process's main thread, into a ``MemoryQueue`` (cProfile'd: parse,
   validate, block building, zstd) -- the work each reader process does -- then timed
   without profiler into a ``MemoryQueue`` and a durable ``LmdbQueue``, sequentially,
   and with reader threads.
3. **The dispatcher and sink alone**: the dispatcher tailing that filled ``LmdbQueue``
   and writing the changefeed, cProfile'd, then timed without profiler.
4. **py-spy** (in the ``bench`` extra) on ``python -m olr_buffer.cli replay`` in a child,
   ``--threads --subprocesses``: samples of every thread of the replay and of its reader
   processes, once with ``--gil`` (per process, only the thread holding its GIL) and
   once without (every thread that is not idle). This is the view that includes the
   readers.

The numbers under a profiler are slower than without one (cProfile adds ~30-100 % to
Python-heavy code); read them as shares, and take the speed from bench/run_all.py.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

PROFILE_TRANSACTIONS = 26_000  # about 300k records with three threads, seed 1


# ---------------------------------------------------------------------------------------
# cProfile helpers

_AREAS = (
    ("olr_buffer/sources/", "reader (olr_buffer.sources)"),
    ("olr_buffer/dispatcher/", "dispatcher (olr_buffer.dispatcher)"),
    ("olr_buffer/sinks/", "sink (olr_buffer.sinks)"),
    ("olr_buffer/txbuffer/", "queue (olr_buffer.txbuffer)"),
    ("olr_buffer/", "pipeline/cli (olr_buffer)"),
    ("pyarrow", "pyarrow (Python side)"),
    ("threading.py", "threading"),
)


def area_of(func: tuple[str, int, str]) -> str:
    filename, _, name = func
    if filename == "~":
        n = name
        if "acquire" in n or "wait" in n or "sleep" in n:
            return "waiting (locks, events)"
        if "orjson" in n:
            return "orjson"
        if "zstd" in n.lower() or "Zstd" in n:
            return "zstd"
        if "lmdb" in n.lower() or "Transaction" in n or "Cursor" in n or "Environment" in n:
            return "lmdb"
        if "pyarrow" in n or "parquet" in n.lower() or "arrow" in n.lower():
            return "pyarrow (C++)"
        if "fsync" in n:
            return "fsync"
        if "json" in n:
            return "json (stdlib)"
        return "builtins (other)"
    f = filename.replace(os.sep, "/")
    for needle, area in _AREAS:
        if needle in f:
            return area
    return "stdlib/other"


def profile_summary(prof: cProfile.Profile, top: int) -> dict:
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # tottime
    areas: dict[str, float] = defaultdict(float)
    for func, (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        areas[area_of(func)] += tt
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    by_tottime = [
        {"func": _fname(func), "calls": nc, "tottime": tt, "cumtime": ct, "share": tt / total if total else 0}
        for func, (_cc, nc, tt, ct, _c) in rows
    ]
    rows = sorted(((f, v) for f, v in st.stats.items() if "olr_buffer" in f[0]), key=lambda kv: kv[1][3], reverse=True)[
        :top
    ]
    by_cumtime = [
        {"func": _fname(func), "calls": nc, "tottime": tt, "cumtime": ct, "share": ct / total if total else 0}
        for func, (_cc, nc, tt, ct, _c) in rows
    ]
    return {
        "total_s": total,
        "areas": dict(sorted(areas.items(), key=lambda kv: -kv[1])),
        "by_tottime": by_tottime,
        "by_cumtime": by_cumtime,
    }


def _fname(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    f = filename.replace(os.sep, "/")
    m = re.search(r"(olr_buffer/.*)$", f)
    short = m.group(1) if m else os.path.basename(f)
    return f"{short}:{line}({name})"


# ---------------------------------------------------------------------------------------
# The four views


def view_replay(inp: str, work: str, top: int) -> dict:
    from olr_buffer.runtime import replay

    d = benchlib.fresh_dir(os.path.join(work, "cprofile-replay"))
    benchlib.warm_cache(inp)
    benchlib.wait_quiet()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    summary = replay(inp, os.path.join(d, "queue"), os.path.join(d, "changefeed"))
    prof.disable()
    wall = time.perf_counter() - t
    out = profile_summary(prof, top)
    out.update(wall=wall, records_read=summary.records_read, rows=summary.rows_published)
    shutil.rmtree(d, ignore_errors=True)
    return out


def view_readers(inp: str, work: str, top: int) -> dict:
    from olr_buffer.testing import MemoryQueue
    from olr_buffer.txbuffer import LmdbQueue

    out: dict = {}
    benchlib.warm_cache(inp)
    benchlib.wait_quiet()
    # a) into memory, sequentially, profiled
    g = benchlib.redo_source(MemoryQueue(), inp)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for r in g.thread_readers.values():
        r.read_to_end()
    prof.disable()
    out["memory_profiled_s"] = time.perf_counter() - t
    out["records"] = g.figures().records_read
    out["profile"] = profile_summary(prof, top)
    # b) into memory, sequentially, not profiled
    g = benchlib.redo_source(MemoryQueue(), inp)
    t = time.perf_counter()
    for r in g.thread_readers.values():
        r.read_to_end()
    out["memory_s"] = time.perf_counter() - t
    # c) into a durable LmdbQueue, sequentially
    d = benchlib.fresh_dir(os.path.join(work, "readers-lmdb"))
    q = LmdbQueue(os.path.join(d, "queue"))
    try:
        g = benchlib.redo_source(q, inp)
        t = time.perf_counter()
        for r in g.thread_readers.values():
            r.read_to_end()
        out["lmdb_s"] = time.perf_counter() - t
        out["blocks"] = sum(r.stats.blocks for r in g.thread_readers.values())
    finally:
        q.close()
    # d) into a durable LmdbQueue, with the reader threads (as replay runs them)
    d2 = benchlib.fresh_dir(os.path.join(work, "readers-lmdb-threads"))
    q = LmdbQueue(os.path.join(d2, "queue"))
    try:
        g = benchlib.redo_source(q, inp)
        t = time.perf_counter()
        benchlib.read_source(g)
        out["lmdb_threads_s"] = time.perf_counter() - t
    finally:
        q.close()
    shutil.rmtree(d2, ignore_errors=True)
    # e) into a durable LmdbQueue, with reader processes (the pipeline's default, if it has them)
    d3 = benchlib.fresh_dir(os.path.join(work, "readers-lmdb-processes"))
    q = LmdbQueue(os.path.join(d3, "queue"))
    try:
        g = benchlib.redo_source(q, inp, processes=True)
        t = time.perf_counter()
        benchlib.read_source(g)
        out["lmdb_processes_s"] = time.perf_counter() - t
    except TypeError:
        pass  # this version of the redo source has no reader processes
    finally:
        q.close()
    shutil.rmtree(d3, ignore_errors=True)
    out["queue_dir"] = os.path.join(d, "queue")  # filled, for view_dispatcher
    return out


def view_dispatcher(queue_dir: str, work: str, top: int) -> dict:
    """The dispatcher and the changefeed writer on a queue the readers filled."""
    from olr_buffer.dispatcher import Dispatcher
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.txbuffer import LmdbQueue

    cf = benchlib.fresh_dir(os.path.join(work, "dispatcher-changefeed"))
    benchlib.wait_quiet()
    q = LmdbQueue(queue_dir)
    try:
        from olr_buffer.sources.redo.position import POSITION_PREFIX, load_positions

        threads = sorted(load_positions(q.meta_items(POSITION_PREFIX)))
        sink = ChangefeedWriter(cf)
        d = Dispatcher(q, sink, threads, start_index=q.first_index, published_through=sink.last_commit)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        while d.poll():
            pass
        sink.flush()
        prof.disable()
        wall = time.perf_counter() - t
        out = profile_summary(prof, top)
        out.update(wall=wall, published=d.stats.published, rows=d.stats.rows, open=len(d.open))
        # once more without the profiler, for its speed
        cf2 = benchlib.fresh_dir(os.path.join(work, "dispatcher-changefeed-2"))
        sink = ChangefeedWriter(cf2)
        d = Dispatcher(q, sink, threads, start_index=q.first_index, published_through=sink.last_commit)
        t = time.perf_counter()
        while d.poll():
            pass
        sink.flush()
        out["unprofiled_s"] = time.perf_counter() - t
    finally:
        q.close()
    return out


def view_py_spy(inp: str, work: str, gil: bool, rate: int = 200) -> dict | None:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return None
    d = benchlib.fresh_dir(os.path.join(work, "py-spy-gil" if gil else "py-spy"))
    raw = os.path.join(d, "samples.txt")
    benchlib.warm_cache(inp)
    benchlib.wait_quiet()
    cmd = [
        spy,
        "record",
        "--format",
        "raw",
        "--threads",
        "--subprocesses",
        "--nolineno",
        "--rate",
        str(rate),
        "-o",
        raw,
    ]
    if gil:
        cmd.append("--gil")
    cmd += ["--", *benchlib.replay_cmd(inp, d)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0 or not os.path.exists(raw):
        return {"error": (p.stderr or p.stdout)[-2000:]}
    return summarize_raw(raw, wall, rate, gil)


_FRAME = re.compile(r"^(.*) \((.*)\)$")


def summarize_raw(path: str, wall: float, rate: int, gil: bool, top: int = 15) -> dict:
    """Collapsed stacks -> samples per thread group, top self and inclusive functions."""
    per_group: Counter = Counter()
    self_by_group: dict[str, Counter] = defaultdict(Counter)
    incl_by_group: dict[str, Counter] = defaultdict(Counter)
    total = 0
    with open(path) as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            n = int(count)
            frames = stack.split(";")
            group, body = _group(frames)
            if not body:
                continue
            total += n
            per_group[group] += n
            self_by_group[group][_short(body[-1])] += n
            seen = set()
            for f in body:
                s = _short(f)
                if s not in seen and ("olr_buffer" in f or "." not in s.split(" ")[0]):
                    seen.add(s)
                    incl_by_group[group][s] += n
    possible = wall * rate
    return {
        "gil": gil,
        "wall": wall,
        "samples": total,
        "rate": rate,
        "busy_share_of_wall": total / possible if possible else 0,
        "groups": {g: n / total for g, n in per_group.most_common()},
        "self": {g: [(f, n / total) for f, n in c.most_common(top)] for g, c in self_by_group.items()},
        "inclusive": {
            g: [(f, n / total) for f, n in c.most_common(top) if "olr_buffer" in f] for g, c in incl_by_group.items()
        },
    }


_PROC = re.compile(r'^process (\d+):"(.*)"$')
_THREAD = re.compile(r"^thread \((\d+)\)(?:: (.*))?$")


def _group(frames: list[str]) -> tuple[str, list[str]]:
    """(group, Python frames) of one py-spy stack recorded with --threads --subprocesses:
    ``process PID:"cmd"`` frames (the root, then a child), then ``thread (tid): name``."""
    procs = []
    i = 0
    while i < len(frames) and frames[i].startswith("process "):
        m = _PROC.match(frames[i])
        procs.append((int(m.group(1)), m.group(2)) if m else (0, frames[i]))
        i += 1
    tid, name = 0, ""
    if i < len(frames):
        m = _THREAD.match(frames[i])
        if m:
            tid, name = int(m.group(1)), m.group(2) or ""
            i += 1
    body = frames[i:]
    if len(procs) > 1:  # a child process of the replay
        cmd = procs[-1][1]
        if "spawn_main" in cmd:
            return "reader processes (parse, validate, build blocks)", body
        return "other child processes", body
    if name == "MainThread" or (procs and tid == procs[0][0]):
        return "main process: main thread (dispatcher, sink)", body
    if name.startswith("reader-"):
        return "main process: reader threads (append to the queue)", body
    return f"main process: {name or 'other threads'}", body


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    func, where = m.groups()
    where = where.replace(os.sep, "/")
    mm = re.search(r"(olr_buffer/[^:]*)", where)
    return f"{func} ({mm.group(1) if mm else os.path.basename(where)})"


# ---------------------------------------------------------------------------------------
# Report


def report(r: dict, top: int) -> str:
    o = io.StringIO()
    w = o.write
    inp = r["input"]
    w(f"input: {inp['lines']:,} records ({inp['bytes'] / 1e6:.0f} MB), 3 threads, plain .jsonl; durable\n\n")

    a = r["replay"]
    w(
        f"## 1. cProfile of replay, main thread only: {a['wall']:.1f}s wall under the profiler, "
        f"{a['total_s']:.1f}s of main-thread time accounted\n\n"
    )
    w(_areas(a))
    w(_table(a["by_tottime"][:top], "self time"))
    w(_table(a["by_cumtime"][:top], "cumulative (olr_buffer functions)"))

    b = r["readers"]
    n = b["records"]
    w(f"## 2. Reader path alone ({n:,} records, without lwn)\n\n")
    w(f"- into MemoryQueue, sequential, no profiler: {b['memory_s']:.2f}s = {n / b['memory_s']:,.0f} records/s\n")
    w(
        f"- into durable LmdbQueue, sequential: {b['lmdb_s']:.2f}s = {n / b['lmdb_s']:,.0f} records/s "
        f"({b['blocks']} blocks)\n"
    )
    w(
        f"- into durable LmdbQueue, reader threads: {b['lmdb_threads_s']:.2f}s = "
        f"{n / b['lmdb_threads_s']:,.0f} records/s\n"
    )
    if "lmdb_processes_s" in b:
        w(
            f"- into durable LmdbQueue, reader processes: {b['lmdb_processes_s']:.2f}s = "
            f"{n / b['lmdb_processes_s']:,.0f} records/s\n"
        )
    w(f"- under cProfile (MemoryQueue): {b['memory_profiled_s']:.2f}s\n\n")
    w(_areas(b["profile"]))
    w(_table(b["profile"]["by_tottime"][:top], "self time"))

    c = r.get("dispatcher")
    if c and "error" not in c:
        w(
            f"## 3. Dispatcher and sink alone, on the filled queue: {c['unprofiled_s']:.2f}s without profiler "
            f"({n / c['unprofiled_s']:,.0f} records/s), {c['wall']:.2f}s under cProfile\n\n"
        )
        w(_areas(c))
        w(_table(c["by_tottime"][:top], "self time"))
        w(_table(c["by_cumtime"][:top], "cumulative (olr_buffer functions)"))
    elif c:
        w(f"## 3. Dispatcher and sink alone: failed: {c['error']}\n\n")

    for key, title in (("py_spy_gil", "py-spy --gil (who holds the GIL)"), ("py_spy", "py-spy (threads not idle)")):
        s = r.get(key)
        if not s:
            continue
        if "error" in s:
            w(f"## 4. {title}: failed: {s['error']}\n\n")
            continue
        w(
            f"## 4. {title}: {s['wall']:.1f}s wall, {s['samples']:,} samples at {s['rate']}/s "
            f"= {s['busy_share_of_wall']:.2f} threads busy on average\n\n"
        )
        for g, share in s["groups"].items():
            w(f"- {g}: {share:.0%} of the samples\n")
        w("\n")
        for g in s["groups"]:
            w(f"self, {g}:\n\n")
            for f, share in s["self"][g][:12]:
                w(f"    {share:6.1%}  {f}\n")
            w(f"\ninclusive, {g} (share of all samples):\n\n")
            for f, share in s["inclusive"][g][:12]:
                w(f"    {share:6.1%}  {f}\n")
            w("\n")
    return o.getvalue()


def _areas(p: dict) -> str:
    total = p["total_s"] or 1
    lines = ["self time by area:\n\n"]
    for area, t in p["areas"].items():
        if t / total >= 0.005:
            lines.append(f"    {t:7.2f}s {t / total:6.1%}  {area}\n")
    return "".join(lines) + "\n"


def _table(rows: list[dict], title: str) -> str:
    lines = [f"top by {title}:\n\n", f"    {'calls':>10} {'tottime':>8} {'cumtime':>8} {'share':>6}  function\n"]
    for x in rows:
        lines.append(f"    {x['calls']:>10,} {x['tottime']:8.2f} {x['cumtime']:8.2f} {x['share']:6.1%}  {x['func']}\n")
    return "".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=PROFILE_TRANSACTIONS)
    ap.add_argument("--input", help="an existing input directory instead of a simulated one")
    ap.add_argument("--work", default=os.path.join("/tmp", "olr-bench"))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--report", help="also write the report to this file")
    ap.add_argument("--no-py-spy", action="store_true")
    ap.add_argument("--json", action="store_true", help="print everything as one JSON line")
    args = ap.parse_args()
    work = os.path.join(args.work, "profile")
    os.makedirs(work, exist_ok=True)
    inp = args.input or os.path.join(args.work, f"input-profile-{args.transactions}")
    if args.input:
        desc = benchlib.describe_input(inp)
    else:
        desc = benchlib.prepare_input(inp, transactions=args.transactions, quiet=args.json)
    r: dict = {"name": "profile", "input": {"lines": desc["lines"], "bytes": desc["bytes"], "dir": inp}}
    print("profiling replay (cProfile) ...", file=sys.stderr, flush=True)
    r["replay"] = view_replay(inp, work, args.top)
    print("reader path alone ...", file=sys.stderr, flush=True)
    r["readers"] = view_readers(inp, work, args.top)
    print("dispatcher and sink alone ...", file=sys.stderr, flush=True)
    try:
        r["dispatcher"] = view_dispatcher(r["readers"]["queue_dir"], work, args.top)
    except Exception as exc:  # internal wiring may change under us: say so, go on
        r["dispatcher"] = {"error": f"{type(exc).__name__}: {exc}"}
    if not args.no_py_spy:
        print("py-spy ...", file=sys.stderr, flush=True)
        r["py_spy_gil"] = view_py_spy(inp, work, gil=True)
        r["py_spy"] = view_py_spy(inp, work, gil=False)
    text = report(r, args.top)
    if args.report:
        with open(args.report, "w") as fh:
            fh.write(text)
    if args.json:
        benchlib.print_json(r)
    else:
        print(text)


if __name__ == "__main__":
    main()
