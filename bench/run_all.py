"""Every figure of docs/performance.md, side by side, in one run.

    python bench/run_all.py [--work /tmp/olr-bench] [--transactions 86000] [--repeat 1]
                            [--skip floor,naive,replay,memory,queue] [--markdown]
                            [--results FILE]

1. Prepares the input once: ``olr_buffer.simulate`` with three threads, seed 1 and
   ``--transactions`` (86,000 give about one million records), every sequence plain
   ``.jsonl`` (nobody times decompression). Reused on the next run if unchanged.
2. Runs, each as a child process on that same input, from the page cache, durable:
   the floor (``bench/floor.py``), the naive buffer (``bench/naive_buffer.py``) and
   ``python -m olr_buffer.cli replay ... --json --no-progress`` (from an empty queue and
   changefeed). records/s = the input's lines (``lwn`` included) / the child's wall time
   from fork to exit (interpreter start and imports included, for all three alike).
   Informational: the naive buffer with the GC quieted, replay with ``--no-sync``, and
   replay of the same workload with its archived logs zstd-compressed (as ``simulate``
   writes them by default; not comparable with the floor, which reads plain files).
3. Checks that the naive buffer and replay published the same transactions and rows.
4. Memory: replay on the same workload plus one 1.5-million-row transaction; peak RSS
   (the child's own ``ru_maxrss``) against the replay of step 2. Informational: the naive
   buffer on both.
5. The queue alone: ``bench/queue_vs_alternatives.py``.
6. Prints the table of figures, ratios and targets (``--markdown`` for the docs), and
   writes everything measured to ``WORK/results.json`` (or ``--results``).

With ``--repeat N`` the three throughput contenders run N times each, interleaved, and
the median of each is reported.

The machine may be shared. Before each run the program waits until less than 15 % of
the CPUs are busy; after it, it compares the machine's CPU time (``/proc/stat``) with the
child's own: when other processes used more than 5 % of the machine meanwhile, the run
is measured again (``--tries``, 4), and the least disturbed run is kept. The share is
reported with each figure ("interference").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import replay_throughput  # noqa: E402

TARGETS = {
    "replay_vs_floor": (0.5, "≥ 0.5x (aim 0.8x)"),
    "replay_vs_naive": (2.0, "≥ 2x"),
    "memory_ratio": (1.5, "≤ 1.5x"),
    "queue_vs_diskcache": (30.0, "≥ 30x"),
    "queue_vs_persistqueue": (30.0, "≥ 30x"),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_child(script: str, *args: str) -> tuple[benchlib.Measured, dict]:
    m = benchlib.run_measured(benchlib.python_cmd(script, *args)).check()
    return m, m.last_json()


def measure_floor(inp: str, work: str, lines: int) -> dict:
    benchlib.warm_cache(inp)
    benchlib.wait_quiet()
    m, r = run_child("floor.py", inp, "--json", "--out", os.path.join(work, "floor-out"))
    return {
        **r,
        **m.figures(),
        "records_per_s": benchlib.rate(lines, m.wall),
        "records_per_s_in_process": r["records_per_s"],
    }


def measure_naive(inp: str, work: str, lines: int, quiet_gc: bool = False, out: str = "naive-out") -> dict:
    benchlib.warm_cache(inp)
    benchlib.wait_quiet()
    extra = ["--quiet-gc"] if quiet_gc else []
    m, r = run_child("naive_buffer.py", inp, "--json", "--out", os.path.join(work, out), *extra)
    return {
        **r,
        **m.figures(),
        "records_per_s": benchlib.rate(lines, m.wall),
        "records_per_s_in_process": r["records_per_s"],
    }


def clean_run(label: str, fn, tries: int, tolerance: float = 0.05) -> dict:
    """Run ``fn`` (a measurement) until the rest of the machine used at most ``tolerance``
    of its CPUs meanwhile, at most ``tries`` times; return the least disturbed run.

    The machine may be shared (other people's test runs): a disturbed run is measured
    again rather than reported, and the share of interference is kept with the figure."""
    ncpu = os.cpu_count() or 1
    best = None
    for attempt in range(1, tries + 1):  # noqa: B007 - read after the loop
        r = fn()
        r["interference"] = r.get("other_cpu", 0.0) / (r["wall"] * ncpu) if r.get("wall") else 0.0
        if best is None or r["interference"] < best["interference"]:
            best = r
        if r["interference"] <= tolerance:
            break
        log(f"{label}: other processes used {r['interference']:.0%} of the machine meanwhile; measuring again")
    best["attempts"] = attempt
    return best


def median_run(runs: list[dict]) -> dict:
    if len(runs) == 1:
        return runs[0]
    med = statistics.median(r["records_per_s"] for r in runs)
    best = min(runs, key=lambda r: abs(r["records_per_s"] - med))
    return {**best, "records_per_s": med, "runs": [r["records_per_s"] for r in runs]}


def compare_changefeeds(a: str, b: str) -> dict:
    """Do two changefeed directories hold the same transactions and rows?

    Rows are compared per transaction (by commit SCN and XID, then op_seq), so a
    different order of commits that share an SCN counts apart, as ``order_differences``."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    cols = ["tx_seq", "op_seq", "c_scn", "xid", "op", "scn", "sub", "thread", "rid", "before", "after", "sql"]

    def load(d):
        t = ds.dataset(d, format="parquet").to_table(columns=cols)
        return t.sort_by([("c_scn", "ascending"), ("xid", "ascending"), ("op_seq", "ascending")])

    ta, tb = load(a), load(b)
    out = {"rows": [ta.num_rows, tb.num_rows]}
    same = ta.num_rows == tb.num_rows and all(ta[c].equals(tb[c]) for c in cols[1:])
    out["same_transactions_and_rows"] = same
    if not same and ta.num_rows == tb.num_rows:
        out["differing_columns"] = [c for c in cols[1:] if not ta[c].equals(tb[c])]

    def order(t):
        t = t.filter(pc.equal(t["op_seq"], 0)).sort_by("tx_seq")
        return t["xid"].to_pylist()

    oa, ob = order(ta), order(tb)
    out["transactions"] = [len(oa), len(ob)]
    out["order_differences"] = sum(1 for x, y in zip(oa, ob) if x != y)
    return out


def build_table(res: dict) -> list[dict]:
    rows: list[dict] = []

    def add(figure, value, target="", ratio=None, key=None, info=False):
        status = ""
        if key and ratio is not None:
            limit = TARGETS[key][0]
            ok = ratio <= limit if key == "memory_ratio" else ratio >= limit
            status = "met" if ok else "NOT met"
            if key == "replay_vs_floor" and ok and ratio < 0.8:
                status = "met (aim 0.8x not yet)"
        rows.append(
            {
                "figure": figure,
                "value": value,
                "target": target,
                "ratio": "" if ratio is None else f"{ratio:.2f}x",
                "status": status,
                "info": info,
            }
        )

    f, n, r = res.get("floor"), res.get("naive"), res.get("replay")

    def speed(x):
        return f"{x['records_per_s']:,.0f} records/s ({x['wall']:.1f}s, peak RSS {benchlib.mib(x['peak_rss'])})"

    if f:
        add("floor: pyarrow json -> Parquet", speed(f))
    if n:
        add("naive in-memory buffer (stdlib json, heapq, dict)", speed(n))
    if res.get("naive_quiet_gc"):
        add("naive buffer, GC quieted", speed(res["naive_quiet_gc"]), info=True)
    if r:
        add("olr-buffer replay, durable", speed(r))
    if res.get("replay_nosync"):
        add("olr-buffer replay --no-sync", speed(res["replay_nosync"]), info=True)
    if res.get("replay_zst"):
        add("olr-buffer replay, archived logs as .jsonl.zst", speed(res["replay_zst"]), info=True)
    if r and f:
        x = r["records_per_s"] / f["records_per_s"]
        add("replay vs floor", "", TARGETS["replay_vs_floor"][1], x, "replay_vs_floor")
    if r and n:
        x = r["records_per_s"] / n["records_per_s"]
        add("replay vs naive buffer", "", TARGETS["replay_vs_naive"][1], x, "replay_vs_naive")
    m = res.get("memory")
    if m:
        add(
            f"replay peak RSS, +1 tx of {m['large_rows']:,} rows vs without",
            f"{benchlib.mib(m['large']['peak_rss'])} vs {benchlib.mib(m['base']['peak_rss'])}",
            TARGETS["memory_ratio"][1],
            m["ratio"],
            "memory_ratio",
        )
        if "naive_large" in m:
            add(
                "naive buffer peak RSS, same two inputs",
                f"{benchlib.mib(m['naive_large']['peak_rss'])} vs {benchlib.mib(m['naive_base']['peak_rss'])}",
                "",
                m["naive_ratio"],
                info=True,
            )
    q = res.get("queue")
    if q:
        byname = {row["name"]: row for row in q["rows"]}
        lm = next((row for row in q["rows"] if row["name"].startswith("LmdbQueue blocks")), None)
        for row in q["rows"]:
            note = f"{row['appended']:,} records" + ("" if row["target"] else f"; {row['note']}")
            add(
                f"queue: {row['name']}",
                f"{row['combined_per_s']:,.0f} records/s append+tail ({note})",
                info=not row["target"],
            )
        for name, key in (
            ("diskcache.Deque durable", "queue_vs_diskcache"),
            ("persistqueue.SQLiteQueue", "queue_vs_persistqueue"),
        ):
            if lm and name in byname:
                add(
                    f"LmdbQueue vs {name}",
                    "",
                    TARGETS[key][1],
                    lm["combined_per_s"] / byname[name]["combined_per_s"],
                    key,
                )
    return rows


def print_table(rows: list[dict], markdown: bool) -> None:
    if markdown:
        print("| figure | value | target | ratio | status |")
        print("|---|---|---|---|---|")
        for r in rows:
            fig = r["figure"] + (" *(info)*" if r["info"] else "")
            print(f"| {fig} | {r['value']} | {r['target']} | {r['ratio']} | {r['status']} |")
        return
    w = max(len(r["figure"]) + (7 if r["info"] else 0) for r in rows)
    for r in rows:
        fig = r["figure"] + (" (info)" if r["info"] else "")
        print(f"{fig:<{w}}  {r['value']:<60} {r['target']:<18} {r['ratio']:>8}  {r['status']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=os.path.join("/tmp", "olr-bench"))
    ap.add_argument("--transactions", type=int, default=benchlib.DEFAULT_TRANSACTIONS)
    ap.add_argument("--threads", type=int, default=benchlib.DEFAULT_THREADS)
    ap.add_argument("--seed", type=int, default=benchlib.DEFAULT_SEED)
    ap.add_argument("--large-rows", type=int, default=benchlib.LARGE_TX_ROWS)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each throughput contender (median reported)")
    ap.add_argument(
        "--tries",
        type=int,
        default=4,
        help="measure a run again (up to this many times) when other processes disturbed it",
    )
    ap.add_argument("--skip", default="", help="comma list of floor,naive,replay,memory,queue,info")
    ap.add_argument("--queue-records", type=int, default=1_000_000)
    ap.add_argument("--alt-records", type=int, default=100_000)
    ap.add_argument("--queue-budget", type=float, default=60.0, help="seconds per phase for diskcache/persist-queue")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--results", help="where to write all results as JSON (default WORK/results.json)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.work, exist_ok=True)
    t_start = time.monotonic()

    res: dict = {"machine": benchlib.machine_info(args.work), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    log(f"machine: {res['machine']['nproc']} x {res['machine'].get('cpu')}, {res['machine'].get('ram_gib')} GiB")
    inp = os.path.join(args.work, "input")
    common = dict(transactions=args.transactions, threads=args.threads, seed=args.seed)
    desc = benchlib.prepare_input(inp, **common)
    lines = desc["lines"]
    res["input"] = {k: desc[k] for k in ("params", "lines", "bytes")} | {"stats": desc.get("stats")}

    tries = args.tries
    floors, naives, replays = [], [], []
    for i in range(args.repeat):
        if "floor" not in skip:
            log(f"floor (run {i + 1}) ...")
            floors.append(clean_run("floor", lambda: measure_floor(inp, args.work, lines), tries))
        if "naive" not in skip:
            log(f"naive buffer (run {i + 1}) ...")
            naives.append(clean_run("naive", lambda: measure_naive(inp, args.work, lines), tries))
        if "replay" not in skip:
            log(f"olr-buffer replay (run {i + 1}) ...")
            replays.append(
                clean_run(
                    "replay",
                    lambda: replay_throughput.measure(inp, os.path.join(args.work, "replay"), lines=lines),
                    tries,
                )
            )
    if floors:
        res["floor"] = median_run(floors)
    if naives:
        res["naive"] = median_run(naives)
    if replays:
        res["replay"] = median_run(replays)
    if "info" not in skip:
        if "naive" not in skip:
            log("naive buffer, GC quieted (info) ...")
            res["naive_quiet_gc"] = clean_run(
                "naive --quiet-gc",
                lambda: measure_naive(inp, args.work, lines, quiet_gc=True, out="naive-out-gc"),
                tries,
            )
        if "replay" not in skip:
            log("olr-buffer replay --no-sync (info) ...")
            res["replay_nosync"] = clean_run(
                "replay --no-sync",
                lambda: replay_throughput.measure(
                    inp, os.path.join(args.work, "replay-nosync"), durable=False, lines=lines
                ),
                tries,
            )
        if "replay" not in skip:
            zst = os.path.join(args.work, "input-zst")
            zdesc = benchlib.prepare_input(zst, compress=True, **common)
            log("olr-buffer replay on zstd-compressed archived logs (info) ...")
            res["replay_zst"] = clean_run(
                "replay zst",
                lambda: replay_throughput.measure(zst, os.path.join(args.work, "replay-zst"), lines=zdesc["lines"]),
                tries,
            )
    if "naive" not in skip and "replay" not in skip:
        log("comparing the naive buffer's output with replay's changefeed ...")
        res["check"] = compare_changefeeds(
            os.path.join(args.work, "replay", "changefeed"), os.path.join(args.work, "naive-out")
        )

    if "memory" not in skip:
        large_in = os.path.join(args.work, "input-large")
        benchlib.prepare_input(large_in, large_tx_rows=args.large_rows, **common)
        mem: dict = {"large_rows": args.large_rows}
        if "replay" in res and len(replays) == 1:
            mem["base"] = res["replay"]
        else:
            log("memory: replay without the large transaction ...")
            mem["base"] = clean_run(
                "replay", lambda: replay_throughput.measure(inp, os.path.join(args.work, "replay"), lines=lines), tries
            )
        log("memory: replay with the large transaction ...")
        mem["large"] = clean_run(
            "replay large", lambda: replay_throughput.measure(large_in, os.path.join(args.work, "replay-large")), tries
        )
        mem["ratio"] = mem["large"]["peak_rss"] / mem["base"]["peak_rss"]
        if "info" not in skip and "naive" not in skip:
            log("memory: naive buffer with the large transaction (info) ...")
            nl = clean_run("naive large", lambda: measure_naive(large_in, args.work, 0, out="naive-out-large"), tries)
            mem["naive_base"] = {"peak_rss": res["naive"]["peak_rss"], "wall": res["naive"]["wall"]}
            mem["naive_large"] = {"peak_rss": nl["peak_rss"], "wall": nl["wall"]}
            mem["naive_ratio"] = nl["peak_rss"] / res["naive"]["peak_rss"]
        res["memory"] = mem

    if "queue" not in skip:
        log("queue alone vs diskcache and persist-queue ...")
        qargs = [
            "--json",
            "--work",
            os.path.join(args.work, "queue"),
            "--records",
            str(args.queue_records),
            "--alt-records",
            str(args.alt_records),
            "--budget",
            str(args.queue_budget),
        ]
        if "info" in skip:
            qargs.append("--no-extra")
        mq, res["queue"] = run_child("queue_vs_alternatives.py", *qargs)
        res["queue"]["other_cpu"] = mq.other_cpu
        res["queue"]["wall"] = mq.wall

    res["total_seconds"] = time.monotonic() - t_start
    rows = build_table(res)
    res["table"] = rows
    out = args.results or os.path.join(args.work, "results.json")
    with open(out, "w") as fh:
        json.dump(res, fh, indent=2, default=str)

    m = res["machine"]
    print(
        f"\nmachine: {m['nproc']} CPUs ({m.get('cpu')}), {m.get('ram_gib')} GiB RAM, "
        f"disk {m.get('disk', {}).get('device')} ({m.get('disk', {}).get('fs')}), fsync {m.get('fsync_ms')} ms; "
        f"Python {m['python']}"
    )
    print(
        f"input: {lines:,} records ({desc['bytes'] / 1e6:,.0f} MB plain JSON Lines), {args.threads} threads, "
        f"seed {args.seed}, {args.transactions:,} transactions; durable everywhere unless marked"
    )
    if "check" in res:
        c = res["check"]
        print(
            f"check: naive vs replay: {c['transactions'][0]:,} vs {c['transactions'][1]:,} transactions, "
            f"{c['rows'][0]:,} vs {c['rows'][1]:,} rows, same transactions and rows: "
            f"{c['same_transactions_and_rows']}, commits in a different position: {c['order_differences']}"
        )
    dist = [
        f"{k} {res[k]['interference']:.0%}"
        for k in ("floor", "naive", "replay", "naive_quiet_gc", "replay_nosync", "replay_zst")
        if k in res and "interference" in res[k]
    ]
    if "memory" in res:
        dist += [f"memory {k} {res['memory'][k].get('interference', 0):.0%}" for k in ("base", "large")]
    if dist:
        print("interference (share of the machine other processes used during the reported run): " + ", ".join(dist))
    for k in ("floor", "naive", "replay"):
        if k in res and "runs" in res[k]:
            print(f"{k} runs (records/s): " + ", ".join(f"{x:,.0f}" for x in res[k]["runs"]))
    print()
    print_table(rows, args.markdown)
    print(f"\n(all results in {out}; {res['total_seconds'] / 60:.1f} minutes)")


if __name__ == "__main__":
    main()
