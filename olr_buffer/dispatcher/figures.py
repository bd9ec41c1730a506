"""The figures every replay reports, whichever engine ran it (this process's dispatcher or
a Spark job): what the transaction rules did and what was published."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ReplayFigures:
    """What one replay did (counts are this run's), and where the changefeed stands.

    ``runtime.RunSummary`` (``replay``, ``run``) and ``spark.SparkReplaySummary``
    (``replay --engine spark``) extend it with their engine's own figures."""

    threads: list[int] = field(default_factory=list)
    records_read: int = 0
    transactions_published: int = 0
    rows_published: int = 0
    rolled_back: int = 0
    no_begin: int = 0  # partial: a commit with no begin at or below its SCN, not published
    empty: int = 0  # nothing left after compensation
    already_published: int = 0  # at or below the changefeed's last commit (a rerun's)
    compensations: int = 0
    unmatched_compensations: int = 0  # found no row to cancel
    late_records: int = 0  # after their transaction's end: ignored
    extra_end_records: int = 0  # a second end of a transaction: ignored
    open_transactions: int = 0  # not ended at the end of the input
    next_tx_seq: int = 0
    files_published: int = 0  # by this run
    changefeed_files: int = 0  # the changefeed's, this run's and earlier ones
    quarantined: int = 0  # bad lines set aside in the dead-letter file
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
