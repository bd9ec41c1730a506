"""A writer process for the lease tests, driven line by line on stdin:

acquire            take the lease (prints "held <generation>" or "refused <message>")
publish            ensure the lease, then create ``published/<n>-<writer>`` ("published
                   <name>" or "lost <message>")
release            give the lease up ("released")

python -m tests.store.lease_worker STORE_URI TTL SKEW [OWNER]
"""

from __future__ import annotations

import sys

from olr_buffer.store import LeaseHeldError, LeaseLostError, open_store
from olr_buffer.store.lease import Lease


def main() -> None:
    store = open_store(sys.argv[1])
    lease = Lease(
        store, ttl=float(sys.argv[2]), skew=float(sys.argv[3]), owner=sys.argv[4] if len(sys.argv) > 4 else None
    )
    print("ready", lease.writer_id, flush=True)
    n = 0
    for line in sys.stdin:
        command = line.strip()
        if command == "acquire":
            try:
                lease.acquire()
                print("held", lease.generation, flush=True)
            except LeaseHeldError as exc:
                print("refused", exc, flush=True)
        elif command == "publish":
            try:
                lease.ensure()
                name = f"published/{n:04d}-{lease.writer_id}"
                store.create(name, b"x")
                n += 1
                print("published", name, flush=True)
            except LeaseLostError as exc:
                print("lost", exc, flush=True)
        elif command == "release":
            lease.release()
            print("released", flush=True)


if __name__ == "__main__":
    main()
