"""``olr_buffer.compiled``: the one loader of the compiled parts, which ``--version`` and
each part's pure-Python fallback go by (the parts' own tests: ``tests/cli/test_version.py``,
``tests/sources/redo/test_compiled.py``, ``tests/sources/postgres/test_tuplescan.py``,
``tests/test_changes_columns.py``, ``tests/dispatcher/test_batchscan.py``)."""

from __future__ import annotations

import importlib

import pytest

from olr_buffer.compiled import PURE_PYTHON_ENV, load_compiled

# a compiled part this checkout builds (setup.py), and a name no build gives
BUILT = "olr_buffer.changes.recscan"
NOT_BUILT = "olr_buffer.changes.no_such_step"


def test_a_built_module_is_loaded_and_said_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    for unset in (None, "", "0", " 0 "):
        if unset is None:
            monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
        else:
            monkeypatch.setenv(PURE_PYTHON_ENV, unset)
        module, words = load_compiled(BUILT, "read-back step")
        assert module is importlib.import_module(BUILT), unset
        assert words == "compiled"


def test_a_module_not_built_is_pure_python_and_says_what_was_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    assert load_compiled(NOT_BUILT, "thing step") == (
        None,
        "pure Python (the compiled thing step was not built at install)",
    )


@pytest.mark.parametrize("value", ["1", "yes", " 1 "])
def test_the_variable_turns_a_built_module_off_and_says_so(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(PURE_PYTHON_ENV, value)
    assert PURE_PYTHON_ENV == "OLR_BUFFER_PURE_PYTHON"
    for name in (BUILT, NOT_BUILT):
        assert load_compiled(name, "read-back step") == (None, "pure Python (OLR_BUFFER_PURE_PYTHON is set)")
