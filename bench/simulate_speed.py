"""How fast ``olr-buffer simulate`` writes a million records (run by hand; not a test).

    python bench/simulate_speed.py [--transactions 95000] [--threads 3] [--repeat 3]

The simulator writes the correctness workload of the tests and of the demo; a user who
asks it for a million records should not wait long. This prints records, seconds and
records/s for each run (wall time and the process's CPU time), so the figure is taken
by hand on a quiet machine and reported, never asserted in the test suite.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from olr_buffer.simulate import simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=95_000, help="about 1M records at the default 95,000")
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for run in range(1, args.repeat + 1):
        with tempfile.TemporaryDirectory(prefix="olr-sim-bench-") as d:
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            stats = simulate(Path(d), threads=args.threads, transactions=args.transactions, seed=args.seed)
            wall = time.perf_counter() - t0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
            print(
                f"run {run}: {stats.records:,} records in {wall:.1f} s wall, {cpu:.1f} s CPU: "
                f"{stats.records / wall:,.0f} records/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
