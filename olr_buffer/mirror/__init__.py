"""Mirror tables (docs/mirror.md): each source table of a changefeed kept as a typed Delta
table, one row per key, exactly once, written with ``deltalake``. Downstream of the sinks:
it reads the changefeed that :mod:`olr_buffer.sinks.parquet` publishes."""

from .errors import MirrorDataError, MirrorError
from .metrics import MirrorMetrics
from .progress import mirror_status, render_mirror
from .rules import Change, Plan, TableRules
from .service import Mirror, MirrorOptions, MirrorResult, mirror
from .table import app_id, arrow_rows

__all__ = [
    "Change",
    "Mirror",
    "MirrorDataError",
    "MirrorError",
    "MirrorMetrics",
    "MirrorOptions",
    "MirrorResult",
    "Plan",
    "TableRules",
    "app_id",
    "arrow_rows",
    "mirror",
    "mirror_status",
    "render_mirror",
]
