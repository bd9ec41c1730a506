"""A writer for the kill tests: creates objects ``obj-<n>`` of 1 MiB whose bytes are
derived from ``n``, as fast as it can, printing each name once created, until killed.

    python -m tests.store.create_loop STORE_URI
"""

from __future__ import annotations

import hashlib
import sys

from olr_buffer.store import open_store

SIZE = 1 << 20


def content(n: int) -> bytes:
    block = hashlib.sha256(str(n).encode()).digest()
    return (block * (SIZE // len(block) + 1))[:SIZE]


def main() -> None:
    store = open_store(sys.argv[1])
    n = 0
    while True:
        store.create(f"obj-{n:06d}", content(n))
        print(f"obj-{n:06d}", flush=True)
        n += 1


if __name__ == "__main__":
    main()
