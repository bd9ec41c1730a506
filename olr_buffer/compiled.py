"""The compiled parts (Cython extensions, built by setup.py at install): load one, or say
why its pure-Python reference runs instead.

Each compiled part (the redo reader's loop, the PostgreSQL reader's insert step, the
read-back of rows to columns, the dispatcher's batch step) has a pure-Python reference
that gives the same results.
:func:`load_compiled` gives the compiled module, or None where it was not built (no C
compiler at install) or ``OLR_BUFFER_PURE_PYTHON=1`` is set (tests, benchmarks); with the
step in words, as ``olr-buffer --version`` shows it.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: set to 1 to run every pure-Python reference even where the compiled parts are built
PURE_PYTHON_ENV = "OLR_BUFFER_PURE_PYTHON"


def load_compiled(module_name: str, what: str) -> tuple[ModuleType | None, str]:
    """The compiled module ``module_name`` (a full dotted name) and ``"compiled"``; or None
    and ``"pure Python (...)"`` with the reason, ``what`` naming the part
    (``"reader loop"``)."""
    if os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_ENV} is set)"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None, f"pure Python (the compiled {what} was not built at install)"
    return module, "compiled"
