"""The program runs without pandas (imported first, before pyarrow is).

pyarrow imports pandas, if it is installed, only to look for pandas objects: in its first
``pa.array(...)`` of a process and whenever Arrow infers a type from Python values
(apache/arrow#34994; ``_is_array_like`` in pyarrow's ``array.pxi``, the pandas static
data of Arrow's Python helpers). olr-buffer builds its arrays from lists and Arrow data,
never from pandas objects, yet that import cost every command about 0.25 s of CPU at
start and 40 MiB of memory for as long as it ran (pandas comes with the ``spark`` extra).

:func:`skip_pandas` makes ``import pandas`` fail in the program's process (an import
hook first on ``sys.meta_path``), which pyarrow, Arrow, delta-rs and pyiceberg all take
as pandas not installed: none of them needs it for what olr-buffer asks of them. The one
command that hands pandas objects to pyarrow (``replay --engine spark``: the Spark driver)
calls :func:`allow_pandas` first. The hook's error names this module, should anything
else ever need pandas here.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import hook under which ``pandas`` is not found."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(
                f"{fullname} is not imported by olr-buffer's commands (see olr_buffer/cli/pandas_probe.py)",
                name=fullname,
            )
        return None


def skip_pandas() -> None:
    """From now on in this process, ``import pandas`` fails (unless it is imported already)."""
    if "pandas" in sys.modules or any(isinstance(f, _NoPandas) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _NoPandas())


def allow_pandas() -> None:
    """Undo :func:`skip_pandas`, and make pyarrow look for pandas again (a pandas function
    of pyarrow does: the answer is kept) before pandas objects reach it."""
    hooks = [f for f in sys.meta_path if isinstance(f, _NoPandas)]
    for hook in hooks:
        sys.meta_path.remove(hook)
    if not hooks or importlib.util.find_spec("pandas") is None:
        return
    import pyarrow as pa

    pa.table({"_": pa.array([], pa.int64())}).to_pandas()
