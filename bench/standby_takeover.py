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
  line at its next publication, and is started again as the standby; with the input all
  published, it has none to make and is killed). The standby can tell nothing from a stopped
  process, so it waits for the lease to expire: what happens when the active service's
  machine dies, loses its network or hangs, as another machine sees it.

For each: ``detect`` (the death to the standby's "taking the changefeed over" line),
``open`` (to its "active now" line: lease taken, changefeed adopted, source opened) and
``first publication`` (to the first new ``part-`` file listed on the store, polled every
20 ms). The first take-over of a standby reads the redo input from its start (its queue is
new; the commits already published are skipped), later ones from where its own queue
stopped: the input's size at that moment is printed. Once the input is written to its
end and the changefeed holds all of it, nothing is left for a standby to publish: the
trials from then on measure ``detect`` and ``open`` only (``first_publication_s`` null,
said once on stderr). Run by hand; the figures go to bench/log/ and docs/operations.md.
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


class Input:
    """The live input as the writer (``tests.live_writer``) makes it: whether it is written
    to its end and the changefeed holds every transaction of it (nothing more will be
    published)."""

    def __init__(self, writer: subprocess.Popen, live: Path, store) -> None:
        self.writer, self.live, self.store = writer, live, store
        self._committed: int | None = None  # the input's transactions, once it is whole

    def all_published(self) -> bool:
        if self.writer.poll() is None:
            return False
        if self._committed is None:
            from tests.contract_model import expected_changefeed

            self._committed = expected_changefeed(self.live).committed
        try:
            manifest = json.loads(self.store.read("_olr_buffer/manifest.json"))
        except Exception:  # noqa: BLE001 - not there yet
            return False
        return manifest.get("next_tx_seq", -1) >= self._committed


def first_new_part(store, known: set[str], whole: Input, timeout: float = 300) -> float | None:
    """When a file not in ``known`` was first listed; None if none comes because the input
    is written to its end and all published."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if part_names(store) - known:
            return time.time()
        if whole.all_published():
            return time.time() if part_names(store) - known else None
        time.sleep(0.02)
    raise RuntimeError("no new file published")


FIGURES = ("detect_s", "open_s", "first_publication_s")


def median(values) -> float | None:
    """The median of the values measured (None: none was)."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


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
    whole = Input(writer, live, store)
    services = {"a": service("qa")}
    services["a"].when("active now")
    services["b"] = service("qb")
    services["b"].when("standby: the changefeed .* is written by")
    active, waiting = "a", "b"
    results: dict[str, list[dict]] = {"kill": [], "stop": []}
    ended = False  # the input written and published: no first publication to measure
    try:
        for trial in range(args.trials * 2):
            how = ("kill", "stop")[trial % 2]
            first_new_part(store, part_names(store), whole)  # the active one publishes (if any is left)
            old, new = services[active], services[waiting]
            since = len(new.lines)
            known = part_names(store)
            size = input_bytes(str(live))
            t0 = time.time()
            old.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
            published = first_new_part(store, known, whole)
            if published is None and not ended:
                ended = True
                print(
                    f"the input was written to its end and published before the take-over of trial {trial}: it "
                    "and the later ones are measured without a first publication (give more --transactions or "
                    "a lower --rate)",
                    file=sys.stderr,
                    flush=True,
                )
            detected = new.when("taking the changefeed .* over", since)
            opened = new.when("active now", since)
            if how == "stop":
                old.proc.send_signal(signal.SIGCONT)
                if whole.all_published():  # (it stops, fenced, at its next publication: none will come)
                    old.proc.kill()
            old.proc.wait(120)
            services[active] = service(f"q{active}")
            services[active].when("standby: the changefeed .* is written by")
            row = {
                "trial": trial,
                "new_queue": trial == 0,  # (the first take-over: a queue that never read the input)
                "input_bytes": size,
                "detect_s": round(detected - t0, 3),
                "open_s": round(opened - detected, 3),
                # (None: the input was published whole before the standby could publish)
                "first_publication_s": round(published - t0, 3) if published is not None else None,
            }
            results[how].append(row)
            print(json.dumps({how: row}), flush=True)
            active, waiting = waiting, active
    finally:
        writer.kill()
        for s in services.values():
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.proc.kill()
        server.stop()
    summary = {how: {key: median(r[key] for r in rows) for key in FIGURES} for how, rows in results.items() if rows}
    print(json.dumps({"settings": vars(args), "median": summary}, indent=2))


if __name__ == "__main__":
    main()
