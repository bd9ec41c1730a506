"""Whole runs side by side: today's ``olr-buffer replay``, the columnar prototype's replay
(``replay_columnar.py``) and the pyarrow floor (``bench/floor.py``), interleaved, each a
child process timed by ``wait4``: CPU (user+sys of it and every descendant it reaped:
the reader processes, the fork server) and wall time, interpreter start included.

    PYTHONPATH=. python bench/columnar/compare_replay.py INPUT_DIR [--work DIR] [--runs 3] [--json]

CPU µs a line = CPU seconds / the input's lines (``lwn`` included). The outputs of the
two replays are compared once (``Table.equals`` after sorting by tx_seq, op_seq). No wait
for a quiet machine: on a shared machine CPU time is the figure to read, not wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from stages_columnar import compare  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--work", default="/tmp/olr-columnar")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma list of contenders to leave out: today,columnar,floor")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lines = benchlib.describe_input(args.input)["lines"]
    env = dict(os.environ, PYTHONPATH=str(benchlib.REPO_DIR))
    today_dir = os.path.join(args.work, "cmp-today")
    col_dir = os.path.join(args.work, "cmp-columnar")
    contenders = {
        "today": lambda: benchlib.replay_cmd(args.input, today_dir),
        "columnar": lambda: [
            sys.executable,
            os.path.join(HERE, "replay_columnar.py"),
            args.input,
            "--queue",
            os.path.join(col_dir, "queue"),
            "--changefeed",
            os.path.join(col_dir, "changefeed"),
        ],
        "floor": lambda: benchlib.python_cmd("floor.py", args.input, "--json"),
    }
    for name in filter(None, args.skip.split(",")):
        contenders.pop(name)
    benchlib.warm_cache(args.input)
    res: dict[str, dict[str, list]] = {k: {"cpu_us": [], "wall": [], "load": []} for k in contenders}
    names = list(contenders)
    for run in range(args.runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            benchlib.fresh_dir(today_dir if name == "today" else col_dir) if name != "floor" else None
            load = os.getloadavg()[0]
            m = benchlib.run_measured(contenders[name](), env=env).check()
            cpu = (m.user + m.sys) / lines * 1e6
            res[name]["cpu_us"].append(round(cpu, 3))
            res[name]["wall"].append(round(m.wall, 2))
            res[name]["load"].append(round(load, 1))
            print(
                f"[{time.strftime('%H:%M:%S')}] {name}: CPU {cpu:.3f} us a line ({m.user + m.sys:.2f} s), "
                f"wall {m.wall:.2f} s, load {load:.1f}",
                file=sys.stderr,
                flush=True,
            )
    out: dict = {"input": args.input, "lines": lines}
    for name, r in res.items():
        out[name] = {
            "cpu_us_median": statistics.median(r["cpu_us"]),
            "wall_median": statistics.median(r["wall"]),
            "lines_per_s_median": round(lines / statistics.median(r["wall"])),
            **r,
        }
    if "today" in res and "columnar" in res:
        out["same_changefeed"] = compare(os.path.join(col_dir, "changefeed"), os.path.join(today_dir, "changefeed"))
    if args.json:
        print(json.dumps(out))
    else:
        for name in res:
            o = out[name]
            print(
                f"{name:10s} CPU {o['cpu_us_median']:6.3f} us a line (runs {o['cpu_us']}), "
                f"wall {o['wall_median']:.2f} s"
                f" (runs {o['wall']}), {o['lines_per_s_median']:,} lines/s"
            )
        if "same_changefeed" in out:
            print(f"same changefeed: {out['same_changefeed']}")


if __name__ == "__main__":
    main()
