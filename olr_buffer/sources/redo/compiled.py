"""Which loop reads the lines of a chunk: the compiled one or the pure-Python reference.

The compiled loop (``linescan.pyx``) is built from source at install with the machine's
C compiler; when it was not built (no compiler at install), or ``OLR_BUFFER_PURE_PYTHON=1``
is set (tests, benchmarks), :class:`ThreadReader` runs its pure-Python loop, which reads
the same records, positions and errors. :data:`READER_LOOP` says which, and why.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: set to 1 to run the pure-Python loop even where the compiled one is built
PURE_PYTHON_ENV = "OLR_BUFFER_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_ENV} is set)"
    try:
        linescan = importlib.import_module(f"{__package__}.linescan")
    except ImportError:
        return None, "pure Python (the compiled reader loop was not built at install)"
    return linescan, "compiled"


#: the compiled module, or None; and the reader loop in words (``olr-buffer --version``)
LINESCAN, READER_LOOP = _load()
