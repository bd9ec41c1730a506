"""Which step makes an insert's JSON text and records (and splits the socket stream's messages):
the compiled one or the pure-Python reference.

The compiled step (``tuplescan.pyx``) is built from source at install with the machine's
C compiler; when it was not built (no compiler at install), or ``OLR_BUFFER_PURE_PYTHON=1``
is set (tests, benchmarks), :class:`~.rows.Table` runs its generated pure-Python function,
which gives the same text. :data:`INSERT_STEP` says which, and why.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: set to 1 to run the pure-Python step even where the compiled one is built (the same
#: variable as the redo reader's)
PURE_PYTHON_ENV = "OLR_BUFFER_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_ENV} is set)"
    try:
        tuplescan = importlib.import_module(f"{__package__}.tuplescan")
    except ImportError:
        return None, "pure Python (the compiled insert step was not built at install)"
    return tuplescan, "compiled"


#: the compiled module, or None; and the insert step in words
TUPLESCAN, INSERT_STEP = _load()
