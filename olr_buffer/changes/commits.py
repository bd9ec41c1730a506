"""A commit's place in the order of commits, and a transaction safe to publish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

INFINITE_SCN = 1 << 63  # a watermark above every SCN: releases every end (end of a replay)


class CommitKey(NamedTuple):
    """Orders end records: ``(scn, thread, sequence, line)``."""

    scn: int
    thread: int
    sequence: int
    line: int


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction that is safe to publish: its commit record's facts."""

    xid: str
    key: CommitKey
    tm: int | None

    @property
    def scn(self) -> int:
        return self.key.scn
