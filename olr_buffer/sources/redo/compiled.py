"""Which loop reads the lines of a chunk: the compiled one or the pure-Python reference.

The compiled loop (``linescan.pyx``) is built from source at install with the machine's
C compiler; when it was not built (no compiler at install), or ``OLR_BUFFER_PURE_PYTHON=1``
is set (tests, benchmarks), :class:`ThreadReader` runs its pure-Python loop, which reads
the same records, positions and errors. :data:`READER_LOOP` says which, and why.
"""

from __future__ import annotations

from ...compiled import PURE_PYTHON_ENV, load_compiled

__all__ = ["LINESCAN", "PURE_PYTHON_ENV", "READER_LOOP"]

#: the compiled module, or None; and the reader loop in words (``olr-buffer --version``)
LINESCAN, READER_LOOP = load_compiled(f"{__package__}.linescan", "reader loop")
