"""Which step makes an insert's JSON text and records (and splits the socket stream's messages):
the compiled one or the pure-Python reference.

The compiled step (``tuplescan.pyx``) is built from source at install with the machine's
C compiler; when it was not built (no compiler at install), or ``OLR_BUFFER_PURE_PYTHON=1``
is set (tests, benchmarks), :class:`~.rows.Table` runs its generated pure-Python function,
which gives the same text. :data:`INSERT_STEP` says which, and why.
"""

from __future__ import annotations

from ...compiled import PURE_PYTHON_ENV, load_compiled

__all__ = ["INSERT_STEP", "PURE_PYTHON_ENV", "TUPLESCAN"]

#: the compiled module, or None; and the insert step in words (``olr-buffer --version``)
TUPLESCAN, INSERT_STEP = load_compiled(f"{__package__}.tuplescan", "insert step")
