"""``olr+file://OUTPUT``: the files OpenLogReplicator's file writer writes, named by the
same ``output`` value its configuration gives (``"writer": {"type": "file", "output":
...}``), and their order.

OpenLogReplicator's ``output`` is a path whose file name may hold one of (its
``WriterFile``):

* ``%i`` (or ``%2i`` .. ``%10i``, zero-filled to that width): a number, the next file when
  one reaches ``max-file-size``;
* ``%t``: the time the file was opened, formatted by ``timestamp-format`` (default
  ``%F_%T``), the next file when one reaches ``max-file-size``;
* ``%s``: the sequence of the redo log the messages come from, a file per log;
* none: one file, appended to.

The files are read in the order of their number (``%i``, ``%s``) or of their name
(``%t``: a ``timestamp-format`` that sorts as time does, as the default does). A file is
complete once a later one exists: OpenLogReplicator writes out and closes a file before
it opens the next.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..base import SourceUsageError

SCHEME = "olr+file"
PREFIX = f"{SCHEME}://"
FORM = f'{PREFIX}OUTPUT (OpenLogReplicator\'s file writer "output", e.g. {PREFIX}/var/olr/out/ORCL-%i.json)'

_NUMBERED = re.compile(r"%(10|[2-9])?i")
_MARKS = ("%t", "%s")


@dataclass(frozen=True)
class Output:
    """The files of one ``output`` value."""

    text: str  # as given (the location without its scheme)
    directory: str
    prefix: str  # of the file name, before the mark
    suffix: str  # after it
    mode: str  # "number" (%i), "time" (%t), "sequence" (%s) or "single" (no mark)

    @property
    def uri(self) -> str:
        return PREFIX + self.text

    def key(self, name: str) -> tuple | None:
        """The sort key of file ``name`` if it is one of these files, else None."""
        if self.mode == "single":
            return () if name == self.prefix else None
        if (
            len(name) <= len(self.prefix) + len(self.suffix)
            or not name.startswith(self.prefix)
            or not name.endswith(self.suffix)
        ):
            return None
        middle = name[len(self.prefix) : len(name) - len(self.suffix)]
        if self.mode == "time":
            return (middle,)
        if not middle.isdigit() or not middle.isascii():
            return None
        return (int(middle), middle)

    def files(self) -> list[str]:
        """The names of the files there now, in the order they are read; an OSError when
        the directory cannot be read (a missing one has none)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            key = self.key(name)
            if key is not None and os.path.isfile(os.path.join(self.directory, name)):
                found.append((key, name))
        found.sort()
        return [name for _, name in found]

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)


def parse_output(location: str) -> Output:
    """The :class:`Output` of ``olr+file://OUTPUT`` (OUTPUT as OpenLogReplicator's
    ``output`` has it, taken literally: ``%`` is its mark, not an escape);
    :class:`SourceUsageError` (exit 2) for one it would refuse itself."""
    if location[: len(PREFIX)].lower() != PREFIX:
        raise SourceUsageError(f"{location!r} is not {FORM}")
    text = location[len(PREFIX) :]
    if not text or text.endswith("/"):
        raise SourceUsageError(f"{location!r} names no file: give {FORM}")
    directory, _, name = text.rpartition("/")
    directory = directory if text.count("/") else "."
    if text.startswith("/") and not directory:
        directory = "/"
    m = _NUMBERED.search(name)
    if m is not None:
        mode, start, end = "number", m.start(), m.end()
    else:
        start = next((name.find(mark) for mark in _MARKS if mark in name), -1)
        if start >= 0:
            mode, end = ("time" if name[start : start + 2] == "%t" else "sequence"), start + 2
        elif "%" in name:
            raise SourceUsageError(
                f"{location!r}: OpenLogReplicator's output takes %i, %2i .. %10i, %t or %s, "
                f"not {name[name.find('%') : name.find('%') + 2]!r}"
            )
        else:
            return Output(text, directory, name, "", "single")
    return Output(text, directory, name[:start], name[end:], mode)
