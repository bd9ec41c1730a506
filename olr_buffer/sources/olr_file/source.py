"""OpenLogReplicator's file-writer output behind the Source contract
(:mod:`olr_buffer.sources.base`): ``olr+file://OUTPUT``, read by one reader (queue thread
1) in a thread of its own, to the end of the last file (``replay``) or following it
(``run``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ...dead_letters import DeadLetters
from ...txbuffer import TxQueue
from ..base import Acknowledgement, Metric, Reader, SourceFigures, SourceKind, SourceSettings, SourceUsageError
from .errors import OlrFileError
from .location import Output, parse_output
from .reader import THREAD, OlrFileReader
from .state import PREFIX, load_columns, load_state, status, status_lines


class OlrFileSource:
    """The files of one OpenLogReplicator ``output``."""

    state_prefix = PREFIX

    def __init__(self, location: str, queue: TxQueue, settings: SourceSettings) -> None:
        self.output: Output = parse_output(location)
        self.name = self.output.uri
        self.queue = queue
        self.settings = settings
        self.reader: OlrFileReader | None = None
        self.dead_letters: DeadLetters | None = None

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        state = load_state(resume)
        if state is not None and state.output and state.output != self.name:
            raise SourceUsageError(
                f"{self.name}: this queue was filled from {state.output}, not from this output",
                hint=f"give {state.output} again, or use a new queue and changefeed directory",
            )
        if self.settings.dead_letter and self.dead_letters is None:
            self.dead_letters = DeadLetters(self.settings.dead_letter)
        s = self.settings
        self.reader = OlrFileReader(
            self.queue,
            self.output,
            state=state,
            columns=load_columns(resume),
            stop=s.stop,
            dead_letters=self.dead_letters,
            on_append=s.on_append,
            block_records=s.block_records,
            block_bytes=s.block_bytes,
        )
        return [THREAD]

    def readers(self, follow: bool, poll_interval: float) -> list[Reader]:
        reader = self.reader
        assert reader is not None
        return [Reader("reader-olr-file", lambda: reader.read(follow, poll_interval))]

    def acknowledge(self, ack: Acknowledgement) -> None:
        pass  # nothing upstream to confirm to

    def threads(self) -> dict[int, bool]:
        return {THREAD: self.reader is not None and self.reader.finished}

    def figures(self) -> SourceFigures:
        return SourceFigures(
            records_read=self.reader.records if self.reader else 0,
            quarantined=self.dead_letters.count if self.dead_letters else 0,
        )

    def input_size(self) -> tuple[int, int] | None:
        """Bytes of the files read past and of the current one up to the reader's offset;
        and of all the files."""
        reader = self.reader
        if reader is None:
            return None
        read = total = 0
        passed = reader.file is not None
        for name in self.output.files():
            try:
                size = os.path.getsize(self.output.path(name))
            except OSError:
                size = 0
            total += size
            if name == reader.file:
                read += min(reader.offset, size)
                passed = False
            elif passed:
                read += size
        return read, total

    def metrics(self) -> list[Metric]:
        r = self.reader
        if r is None:
            return []
        commit = r.last_commit or (0, 0)
        return [
            Metric(
                "olr_file_c_scn",
                "gauge",
                "The c_scn of the last commit read from OpenLogReplicator's output.",
                commit[0],
            ),
            Metric(
                "olr_file_messages_total",
                "counter",
                "Messages read from OpenLogReplicator's output (every run).",
                r.messages,
            ),
        ]

    def close(self) -> None:
        if self.dead_letters:
            self.dead_letters.close()


def build(location: str, queue: TxQueue, settings: SourceSettings, **options) -> OlrFileSource:
    if options:
        raise TypeError(f"the OpenLogReplicator file source takes no options: {', '.join(sorted(options))}")
    return OlrFileSource(location, queue, settings)


def check_replay(location: str) -> None:
    """``replay``: the output must have at least one file (else nothing would be read: bad
    input, exit 3, as a directory without redo logs is)."""
    out = parse_output(location)
    try:
        names = out.files()
    except OSError as exc:
        raise OlrFileError(out.directory, None, f"cannot list the directory: {exc.strerror or exc}") from None
    if not names:
        raise OlrFileError(
            out.directory,
            None,
            f"no file of OpenLogReplicator's output {out.text!r} here",
            hint="give the writer's \"output\" as OpenLogReplicator's configuration has it "
            "(olr+file://DIR/NAME-%i.json)",
        )


def check_location(location: str) -> None:
    """A location that is not ``olr+file://OUTPUT`` is a usage error (exit 2)."""
    parse_output(location)


KIND = SourceKind(
    "olr_file",
    build,
    status,
    "olr_file",
    status_lines,
    check_replay,
    check_location=check_location,
    shows_threads=False,
)

__all__ = ["KIND", "OlrFileSource", "build"]
