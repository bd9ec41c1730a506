"""docs/architecture.md draws the layers as tests/test_imports.py enforces them, and its
worked examples are the files the tests run."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_imports import LAYERS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_the_layer_diagram_is_the_layers_the_import_test_enforces():
    section = DOC.split("## The layers", 1)[1].split("```", 2)[1]
    drawn = {}
    for line in section.strip().splitlines():
        layer, *names = re.split(r" {3,}", line)  # then a note of words, if any
        for name in names:
            if " " not in name:
                drawn[name] = int(layer)
    assert drawn == LAYERS


def test_the_worked_examples_are_the_files_the_tests_run():
    for path in (
        "docs/examples/lines_source.py",
        "tests/sources/test_example_source.py",
        "docs/examples/jsonl_sink.py",
        "tests/sinks/test_example_sink.py",
    ):
        assert f"`{path}`" in DOC and (ROOT / path).is_file(), path
