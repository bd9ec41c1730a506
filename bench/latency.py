"""Commit-to-visible latency of `olr-buffer run` at a steady load.

    python bench/latency.py [--rate 100000] [--seconds 10] [--flush-interval 1.0] [--poll-interval 0.1]
                            [--writer batched|torn] [--json] [-- SERVICE OPTIONS]

A writer process plays a simulated 3-thread workload (`olr-buffer simulate`, ~21 records a
transaction, ~45 % of them `lwn` heartbeats) into a live directory at a steady rate,
stamping every record's `tm` with the time it is written; `olr-buffer run` follows it;
this program watches the changefeed directory and, for every transaction, takes the time
its file became visible minus its commit's `tm`. It prints p50/p90/p99/max under steady
load (the writer starts once the service has opened its changefeed; transactions
committed in the first --warmup seconds of writing are left out, their count and max
printed apart), beside what was really achieved: the rate the writer held, whether the
service kept up (the backlog when the writer stopped, how long the last transaction took
to show, latency at the start and the end of the run), the CPU the service and the
writer used, what other processes used of the machine meanwhile, and the load average.

Writers: `batched` (the default, `bench/latency_writer.py`) writes `--rate * --seconds`
records, whole lines, every `--batch-ms` the records due by then, one write a thread's
file, `tm` stamped at that write; log switches every `--records-per-file` records of a
thread (`--archive`: the sequence before is then replaced by its `.jsonl.zst`). It holds
100k records/s and more. `torn` (`tests/live_writer.py`, all of a `--transactions`
workload) writes a line at a time and tears 5 % of them in two with a 1-20 ms pause
between: a reader's view of a capture that flushes mid-line, but it cannot write more
than ~2,000 records/s.

The watcher lists the changefeed every `--watch-interval` and reads each new file's
`tx_seq` and `c_tm`; a file's visible time is when the listing that shows it returned. It
also reports how long after the file's last change (its ctime: the publication's link
and the removal of its temporary name) the listing saw it, and its own CPU, so that what
it adds can be told apart. Run by hand; workloads are kept under --stage-cache.

At 100k records/s the service needs about one of the 2 cores (8-12 µs of CPU a record):
read "other processes" before the latency; a service that shares the machine with other
work falls behind, and the p99 then measures that (bench/log/2026-11-28-latency-100k.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS_PER_TX = 21  # simulate(lwn_every=8.0): records (lwn included) a transaction, about


def _machine_cpu() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat, steal included)."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its waited-for children (and theirs)."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def _tree_cpu(root: int) -> tuple[float, float]:
    """CPU seconds of process ``root`` and its descendants alive now (with what their
    waited-for children used), and of ``root`` alone (all its threads), from /proc."""
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    stats[int(name)] = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                pass
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, f in stats.items() if int(f[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    ticks = sum(sum(int(x) for x in stats[pid][11:15]) for pid in tree if pid in stats)
    own = sum(int(x) for x in stats[root][11:13]) if root in stats else 0
    return ticks / os.sysconf("SC_CLK_TCK"), own / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def stage_workload(args: argparse.Namespace) -> tuple[str, int]:
    """The simulated workload (kept under --stage-cache), and how many records it holds."""
    from olr_buffer.simulate import simulate

    if args.writer == "torn":
        transactions, per_file = args.transactions, 5000
    else:
        need = args.rate * args.seconds / RECORDS_PER_TX * 1.1
        transactions, per_file = max(4000, math.ceil(need / 10000) * 10000), args.records_per_file
    stage = os.path.join(args.stage_cache, f"t{transactions}-f{per_file}-s9")
    done = os.path.join(stage, "_records")
    if not os.path.exists(done):
        shutil.rmtree(stage, ignore_errors=True)
        stats = simulate(
            stage,
            threads=3,
            transactions=transactions,
            seed=9,
            compress_archived=False,
            lwn_every=8.0,
            records_per_file=per_file,
        )
        with open(done, "w") as fh:
            fh.write(str(stats.records))
    with open(done) as fh:
        return stage, int(fh.read())


def quantile(xs: list[float], p: float) -> float | None:
    """The ``p`` quantile of the sorted ``xs``; None when there is none (JSON's null:
    ``NaN`` is not JSON)."""
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None


def seconds(x: float | None, scale: float = 1.0, unit: str = "s", digits: int = 3) -> str:
    """A figure of the text lines, or ``n/a`` where there is none (see ``no_figure``)."""
    return "n/a" if x is None else f"{x * scale:.{digits}f}{unit}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2000.0, help="records per second written")
    ap.add_argument("--seconds", type=float, default=10.0, help="batched writer: seconds of writing")
    ap.add_argument("--writer", choices=["batched", "torn"], default="batched")
    ap.add_argument("--batch-ms", type=float, default=5.0, help="batched writer: a write every this many ms")
    ap.add_argument("--records-per-file", type=int, default=50000, help="batched writer: log switch after")
    ap.add_argument("--archive", action="store_true", help="batched writer: archive complete sequences as .zst")
    ap.add_argument("--transactions", type=int, default=4000, help="torn writer: the workload's transactions")
    ap.add_argument("--flush-interval", type=float, default=1.0)
    ap.add_argument("--poll-interval", type=float, default=None, help="the service's --poll-interval (its default)")
    ap.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="leave out transactions committed in the first seconds of writing (reader processes start)",
    )
    ap.add_argument("--watch-interval", type=float, default=0.005, help="the watcher lists the changefeed this often")
    ap.add_argument("--stage-cache", default=os.path.join(tempfile.gettempdir(), "olr-latency-stage"))
    ap.add_argument(
        "--dump", help="write 'c_scn c_tm seen ctime' (ns) per transaction to this file (to look at the tail)"
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="also print the figures as one JSON line (strict JSON: a figure the run has none of is null, "
        "its reason under no_figure)",
    )
    ap.add_argument("--log", help="the service's log (JSON lines, --log-level debug) goes to this file")
    ap.add_argument("service_args", nargs="*", help="more options for `olr-buffer run`, after --")
    args = ap.parse_args()

    stage, staged_records = stage_workload(args)
    work = tempfile.mkdtemp(prefix="olr-latency-")
    try:
        live, cf = os.path.join(work, "live"), os.path.join(work, "cf")
        os.makedirs(live)
        log_args = ("--log-level", "debug", "--log-format", "json") if args.log else ("--log-level", "warning")
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "run",
                live,
                "--queue",
                os.path.join(work, "q"),
                "--changefeed",
                cf,
                "--threads",
                "1,2,3",
                "--flush-interval",
                str(args.flush_interval),
                *(("--poll-interval", str(args.poll_interval)) if args.poll_interval is not None else ()),
                *log_args,
                *args.service_args,
            ],
            cwd=ROOT,
            stderr=open(args.log, "w") if args.log else None,  # noqa: SIM115 (closed with the process)
        )
        if args.writer == "batched":
            writer = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "latency_writer.py"),
                    stage,
                    live,
                    "--rate",
                    str(args.rate),
                    "--seconds",
                    str(args.seconds),
                    "--batch-ms",
                    str(args.batch_ms),
                    *(("--archive",) if args.archive else ()),
                ],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert writer.stdout is not None and writer.stdin is not None
            if writer.stdout.readline().strip() != "ready":
                raise SystemExit("the writer did not start")
        # steady load: the writer starts once the service has opened its changefeed, and
        # the first --warmup seconds of writing (reader processes starting) are left out
        t0 = time.monotonic()
        while not os.path.isdir(os.path.join(cf, "_olr_buffer")):
            if service.poll() is not None or time.monotonic() - t0 > 60:
                raise SystemExit("the service did not start")
            time.sleep(0.01)
        load_start = _load()
        machine0, own0, service0 = _machine_cpu(), _own_cpu(), _tree_cpu(service.pid)
        writer_start = time.time_ns()
        if args.writer == "batched":
            writer.stdin.write("go\n")
            writer.stdin.flush()
        else:
            writer = subprocess.Popen(
                [sys.executable, "-m", "tests.live_writer", stage, live, "--rate", str(args.rate), "--tm-now"],
                cwd=ROOT,
            )
        seen: set[str] = set()
        rows: list[tuple[int, int, int, int]] = []  # per transaction: commit tm, seen, file ctime (ns), c_scn
        writer_stats: dict = {}
        writer_cpu = 0.0
        t_end = None
        last_new = time.monotonic()
        watch_cpu = time.process_time()
        while True:
            names = os.listdir(cf) if os.path.isdir(cf) else []
            seen_ns = time.time_ns()
            new = sorted(n for n in names if n.startswith("part-") and n.endswith(".parquet") and n not in seen)
            for name in new:
                seen.add(name)
                path = os.path.join(cf, name)
                ctime = os.stat(path).st_ctime_ns
                table = pq.read_table(path, columns=["tx_seq", "c_tm", "c_scn"])
                firsts: dict[int, tuple[int, int]] = {}
                for tx, tm, scn in zip(*(table.column(c).to_pylist() for c in ("tx_seq", "c_tm", "c_scn"))):
                    firsts.setdefault(tx, (tm, scn))
                rows.extend((tm, seen_ns, ctime, scn) for tm, scn in firsts.values() if tm)
            if new:
                last_new = time.monotonic()
            if t_end is None and writer.poll() is not None:
                t_end = time.monotonic()
                writer_cpu = _own_cpu()[1] - own0[1]
                if args.writer == "batched":
                    assert writer.stdout is not None
                    writer_stats = json.loads(writer.stdout.read().strip().splitlines()[-1])
                else:
                    writer_stats = {
                        "records": staged_records,
                        "seconds": (time.time_ns() - writer_start) / 1e9,
                        "first_write_ns": writer_start,
                        "last_write_ns": time.time_ns(),
                    }
                    writer_stats["rate"] = staged_records / writer_stats["seconds"]
            if t_end is not None and time.monotonic() - last_new > 3 * args.flush_interval + 5:
                break
            time.sleep(args.watch_interval)
        watch_cpu = time.process_time() - watch_cpu
        service1 = _tree_cpu(service.pid)
        service_cpu, main_cpu = service1[0] - service0[0], service1[1] - service0[1]
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=120)
        machine1, own1 = _machine_cpu(), _own_cpu()
        load_end = _load()
        window = (time.time_ns() - writer_start) / 1e9
        others = (machine1 - machine0) - (own1[0] - own0[0]) - writer_cpu - service_cpu

        rows.sort()
        if args.dump:
            with open(args.dump, "w") as fh:
                fh.writelines(f"{scn} {tm} {s} {c}\n" for tm, s, c, scn in rows)
        steady_from = writer_start + int(args.warmup * 1e9)
        steady = [r for r in rows if r[0] >= steady_from]
        lat = sorted((s - tm) / 1e9 for tm, s, *_ in steady)
        warm = [(s - tm) / 1e9 for tm, s, *_ in rows if tm < steady_from]
        watcher = sorted(max(0, s - c) / 1e9 for _, s, c, _ in steady)
        last_write = writer_stats["last_write_ns"]
        backlog = [r for r in rows if r[0] <= last_write and r[1] > last_write]
        drain = (max(r[1] for r in rows) - last_write) / 1e9 if rows else None
        third = len(steady) // 3
        early = sorted((s - tm) / 1e9 for tm, s, *_ in steady[:third])
        late = sorted((s - tm) / 1e9 for tm, s, *_ in steady[-third:]) if third else []

        out = {
            "writer": args.writer,
            "rate_asked": args.rate,
            "rate": round(writer_stats["rate"]),
            "records": writer_stats["records"],
            "writer_behind_max_s": writer_stats.get("worst_behind_s"),
            "flush_interval": args.flush_interval,
            "poll_interval": args.poll_interval,
            "service_args": args.service_args,
            "transactions": len(lat),
            "p50": quantile(lat, 0.5),
            "p90": quantile(lat, 0.9),
            "p99": quantile(lat, 0.99),
            "max": lat[-1] if lat else None,
            "p50_first_third": quantile(early, 0.5),
            "p50_last_third": quantile(late, 0.5),
            "backlog_tx": len(backlog),
            "drain_s": drain,
            "warmup_tx": len(warm),
            "warmup_max": max(warm, default=0.0),
            "watcher_p50": quantile(watcher, 0.5),
            "watcher_p99": quantile(watcher, 0.99),
            "watcher_cpu": watch_cpu / window,
            "window_s": window,
            "service_cpu": service_cpu / window,
            "service_main_cpu": main_cpu / window,
            "writer_cpu": writer_cpu / window,
            "others_cpu": others / window,
            "load_start": load_start,
            "load_end": load_end,
            "files": len(seen),
        }
        # figures without a value are null, each with its reason (a run too short for them)
        no_figure: dict[str, str] = {}
        if not lat:
            why = (
                f"no transaction committed after the first {args.warmup:g}s of writing (--warmup) was seen: "
                "write for longer, or shorten --warmup"
            )
            no_figure.update(dict.fromkeys(("p50", "p90", "p99", "max", "watcher_p50", "watcher_p99"), why))
        if not third:
            why = f"{len(steady)} transaction(s) after the warm-up: fewer than 3, no thirds to compare"
            no_figure.update(dict.fromkeys(("p50_first_third", "p50_last_third"), why))
        if drain is None:
            no_figure["drain_s"] = "no transaction became visible"
        out["no_figure"] = no_figure
        print(
            f"writer {args.writer}: {out['records']:,} records in {writer_stats['seconds']:.1f}s, "
            f"{out['rate']:,} records/s achieved (asked {args.rate:,.0f}); flush interval {args.flush_interval}s, "
            f"poll interval {'default' if args.poll_interval is None else f'{args.poll_interval}s'}"
            + (f"; service options {' '.join(args.service_args)}" if args.service_args else "")
        )
        print(
            f"commit-to-visible latency over {len(lat):,} transactions: p50 {seconds(out['p50'])}  "
            f"p90 {seconds(out['p90'])}  p99 {seconds(out['p99'])}  max {seconds(out['max'])}"
        )
        print(
            f"kept up: {len(backlog):,} transactions committed but not visible when the writer stopped, the last "
            f"visible {seconds(drain)} after; p50 {seconds(out['p50_first_third'])} in the first third of the run, "
            f"{seconds(out['p50_last_third'])} in the last"
        )
        print(
            f"CPU (cores): service {out['service_cpu']:.2f} (its main process {out['service_main_cpu']:.2f}, "
            f"{service_cpu / max(1, out['records']) * 1e6:.1f} µs a record), writer {out['writer_cpu']:.2f}, watcher "
            f"{out['watcher_cpu']:.2f}, other processes {out['others_cpu']:.2f}; load average {load_start} -> "
            f"{load_end}; {len(seen)} files"
        )
        print(
            f"watcher: saw a file p50 {seconds(out['watcher_p50'], 1e3, ' ms', 1)}, "
            f"p99 {seconds(out['watcher_p99'], 1e3, ' ms', 1)} "
            f"after its ctime; left out: {len(warm):,} transactions committed in the first {args.warmup:g}s "
            f"(warm-up), max {out['warmup_max']:.3f}s"
        )
        for key, why in no_figure.items():
            print(f"no {key}: {why}")
        if args.json:
            print(json.dumps(out, allow_nan=False))  # strict JSON: a figure without a value is null
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
