"""Take-over time of ``run --standby``: from the active service's death to the first
publication by the standby, on a changefeed on S3 (moto's server, started here).

    python bench/standby_takeover.py [--trials 3] [--lease-seconds 15] [--lease-renew-interval 5]
                                     [--lease-clock-skew 5] [--standby-poll-interval 1]

Two services, each with its own queue, follow redo files being written (tests.live_writer)
into one changefeed. Each trial ends the active one and measures, on the standby's clock
(the same machine's), the moments its log gives and the store shows:

* ``kill``: SIGKILL. Both services run on this host, so the standby sees at once that the
  holder's process is gone and takes over without waiting for the lease: a crash of the
  process, not of its machine.
* ``stop``: SIGSTOP (then SIGCONT once the standby publishes: the old one stops with one
  line and is started again as the standby). The standby can tell nothing from a stopped
  process, so it waits for the lease to expire: what happens when the active service's
  machine dies, loses its network or hangs, as another machine sees it.

For each: ``detect`` (the death to the standby's "taking the changefeed over" line),
``open`` (to its "active now" line: lease taken, changefeed adopted, source opened) and
``first publication`` (to the first new ``part-`` file listed on the store, polled every
20 ms). The first take-over of a standby reads the redo input from its start (its queue is
new; the commits already published are skipped), later ones from where its own queue
stopped: the input's size at that moment is printed. Run by hand; the figures go to
bench/log/ and docs/operations.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from olr_buffer.simulate import simulate  # noqa: E402
from tests.s3_server import start_moto  # noqa: E402

_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


class Service:
    """``olr-buffer run --standby`` in a process; its log lines with their time."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "olr_buffer.cli", "run", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def when(self, pattern: str, since: int = 0, timeout: float = 300) -> float:
        """The time (seconds since the epoch, from the log line) of the first line from
        ``since`` on that matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines[since:]:
                if re.search(pattern, line):
                    m = _TIME.match(line)
                    assert m, line
                    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if self.proc.poll() is not None and not re.search(pattern, "\n".join(self.lines)):
                raise RuntimeError("the service stopped:\n" + "\n".join(self.lines[-20:]))
            time.sleep(0.02)
        raise RuntimeError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines[-20:]))


def part_names(store) -> set[str]:
    return {o.name for o in store.list("part-")}


def first_new_part(store, known: set[str], timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if part_names(store) - known:
            return time.time()
        time.sleep(0.02)
    raise RuntimeError("no new file published")


def input_bytes(live: str) -> int:
    return sum(os.path.getsize(os.path.join(live, n)) for n in os.listdir(live))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3, help="take-overs of each kind")
    ap.add_argument("--lease-seconds", default="15")
    ap.add_argument("--lease-renew-interval", default="5")
    ap.add_argument("--lease-clock-skew", default="5")
    ap.add_argument("--standby-poll-interval", default="1")
    ap.add_argument("--flush-interval", default="1")
    ap.add_argument("--transactions", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=2_000, help="records a second written to the live input")
    args = ap.parse_args()

    from olr_buffer.store import open_store

    work = Path(tempfile.mkdtemp(prefix="standby-bench-"))
    staged, live = work / "staged", work / "live"
    simulate(staged, threads=2, transactions=args.transactions, seed=7, compress_archived=False)
    live.mkdir()
    server = start_moto(work)
    env = {**os.environ, **server.env()}
    os.environ.update(server.env())
    cf = f"s3://{server.new_bucket()}/changefeed"
    store = open_store(cf)
    settings = [
        "--lease-seconds",
        args.lease_seconds,
        "--lease-renew-interval",
        args.lease_renew_interval,
        "--lease-clock-skew",
        args.lease_clock_skew,
        "--standby-poll-interval",
        args.standby_poll_interval,
        "--flush-interval",
        args.flush_interval,
    ]

    def service(name: str) -> Service:
        return Service(
            [str(live), "--queue", str(work / name), "--changefeed", cf, "--standby", "--threads", "1,2", *settings],
            env,
        )

    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.live_writer", str(staged), str(live), "--rate", str(args.rate)], cwd=ROOT, env=env
    )
    services = {"a": service("qa")}
    services["a"].when("active now")
    services["b"] = service("qb")
    services["b"].when("standby: the changefeed .* is written by")
    active, waiting = "a", "b"
    results: dict[str, list[dict]] = {"kill": [], "stop": []}
    try:
        for trial in range(args.trials * 2):
            how = ("kill", "stop")[trial % 2]
            first_new_part(store, part_names(store))  # the active one publishes
            old, new = services[active], services[waiting]
            since = len(new.lines)
            known = part_names(store)
            size = input_bytes(str(live))
            t0 = time.time()
            old.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
            published = first_new_part(store, known)
            detected = new.when("taking the changefeed .* over", since)
            opened = new.when("active now", since)
            if how == "stop":
                old.proc.send_signal(signal.SIGCONT)
            old.proc.wait(120)
            services[active] = service(f"q{active}")
            services[active].when("standby: the changefeed .* is written by")
            row = {
                "trial": trial,
                "new_queue": trial == 0,  # (the first take-over: a queue that never read the input)
                "input_bytes": size,
                "detect_s": round(detected - t0, 3),
                "open_s": round(opened - detected, 3),
                "first_publication_s": round(published - t0, 3),
            }
            results[how].append(row)
            print(json.dumps({how: row}), flush=True)
            active, waiting = waiting, active
            if writer.poll() is not None:
                print("the input was written to its end: fewer trials", file=sys.stderr)
                break
    finally:
        writer.kill()
        for s in services.values():
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.proc.kill()
        server.stop()
    summary = {
        how: {key: statistics.median(r[key] for r in rows) for key in ("detect_s", "open_s", "first_publication_s")}
        for how, rows in results.items()
        if rows
    }
    print(json.dumps({"settings": vars(args), "median": summary}, indent=2))


if __name__ == "__main__":
    main()
