"""The ``olr-buffer`` command line: wiring only.

One module a command (``replay.py``, ``run.py`` ...), each defining its command on the
group (``@main.command()``, ``group.py``) with what the commands share (``common.py``:
option types and options, --config, errors; ``progress.py``), and what the program sets
up before its imports (``signals.py``, ``pandas_probe.py``); a command is registered by
importing its module below. A new command: a module like ``drop_slot.py``, and its name in
that import."""

from __future__ import annotations

import os
import sys

from .pandas_probe import skip_pandas
from .signals import keep_early_sigterm

# the program (olr-buffer, python -m olr_buffer.cli), not a module another one imports: from
# its first import on (while ``-m`` imports this package, sys.argv[0] is "-m")
if sys.argv[0] == "-m" or os.path.basename(sys.argv[0]) == "olr-buffer":
    keep_early_sigterm()
    skip_pandas()  # before the commands are imported (see pandas_probe.py)

# the commands: importing a module registers its command on main
from . import compact, drop_slot, mirror, replay, run, serve, simulate, status  # noqa: E402, F401
from .group import main, name_environment_variables  # noqa: E402

name_environment_variables()

__all__ = ["main"]
