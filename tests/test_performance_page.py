"""docs/performance.md is a short page of current figures: each section says when (and,
for code figures, on which commit) it was measured; its commands name benchmark programs
that exist and take the options it gives them; the history it replaced is kept under
bench/log/, and the page's links lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "performance.md"
HISTORY = ROOT / "bench" / "log" / "2026-11-performance-history.md"
DATE = re.compile(r"20\d\d-\d\d-\d\d")


def test_the_page_is_short_and_the_history_is_kept():
    assert PAGE.stat().st_size < 16_000, "docs/performance.md is a page of current figures, not a diary"
    history = HISTORY.read_text()
    assert HISTORY.stat().st_size > 60_000 and "## The matrix on main (2026-11-26, 02:01-02:14)" in history


def test_every_figure_says_when_it_was_measured():
    text = PAGE.read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    undated = [
        s.splitlines()[0]
        for s in sections
        if s.splitlines()[0] not in ("Reproduce", "The machine") and not DATE.search(s)
    ]
    assert not undated, undated
    # the code figures name their commit, as the history does
    for title in ("The matrix", "Memory with a large transaction"):
        (section,) = [s for s in sections if s.startswith(title)]
        assert re.search(r"`[0-9a-f]{7}`", section.splitlines()[0]), section.splitlines()[0]
    # the targets table: a date on every row
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and "target" not in line and not line.startswith("|---")
    ]
    targets = rows[: rows.index(next(r for r in rows if r.startswith("| cell")))]
    assert targets and all(DATE.search(r) for r in targets), targets
    # a figure of the page is the history's
    assert "**0.82 s**" in text and "0.82 s" in HISTORY.read_text()
    # the matrix's worst and best cells, its own log's
    matrix_log = (ROOT / "bench" / "log" / "2026-11-29-batch-step.md").read_text()
    for figure in (
        "| narrow-tiny-3t-open5000 | 160 | 206,372 |",
        "| narrow-large-8t | 214 | 440,541 |",
        "| wide-large-8t | 561 | 193,166 |",
        "| narrow-tiny-3t-comp20 | 168 | 250,056 |",
    ):
        assert figure in text and figure in matrix_log, figure
    # the memory's, its own log's
    memory_log = (ROOT / "bench" / "log" / "2026-11-28-read-back-columns.md").read_text()
    for figure in ("| 216 MiB |", "243 MiB (**1.12x**)", "245 MiB (**1.13x**; 1.01x of 1.5M)"):
        assert figure in memory_log, figure
    assert "**216 MiB** without, **243 MiB** with 1.5M rows (**1.12x**)" in " ".join(text.split())
    # and the latency's, its own log's
    latency_log = (ROOT / "bench" / "log" / "2026-11-29-main-process.md").read_text()
    assert "**0.077–0.084 s**" in text and "| 0.082 | 0.109 |" in latency_log and "| 0.077 | 0.093 |" in latency_log
    assert "| 0.119 | 0.138 |" in latency_log and "| 0.353 | 0.379 |" in latency_log


def test_the_commands_name_programs_and_options_that_exist():
    block = re.search(r"## Reproduce\n\n```sh\n(.*?)```", PAGE.read_text(), re.S).group(1)
    commands = [line.split("#")[0].split() for line in block.splitlines() if "bench/" in line]
    assert len(commands) >= 7
    for words in commands:
        script = ROOT / words[1]
        assert words[0] == ".venv/bin/python" and script.is_file(), words
        helptext = subprocess.run(
            [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
        ).stdout
        for word in words[2:]:
            if word.startswith("--"):
                assert word in helptext, f"{words[1]} takes no {word}"
            elif not word[0].isdigit():
                assert word in helptext, f"{words[1]}: {word}?"


def test_links_lead_somewhere():
    for page in (PAGE, HISTORY):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).resolve().exists(), f"{page.name}: {target}"
