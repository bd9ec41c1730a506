"""The product root holds no test-only code, and its names say one thing each
(docs/architecture.md, "Packages")."""

from __future__ import annotations

import ast
from pathlib import Path

import olr_buffer

ROOT = Path(olr_buffer.__file__).parent


def _product_imports_of(prefix: str) -> list[str]:
    """``module imports target`` for each import of a module under ``prefix`` by a module
    of the product outside it (absolute or relative)."""
    found = []
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module.startswith(prefix):
            continue
        package = parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                targets = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            found += [f"{module} imports {t}" for t in targets if t == prefix or t.startswith(prefix + ".")]
    return sorted(set(found))


def test_test_doubles_live_in_testing_which_the_product_never_imports():
    """The tests' doubles (``MemoryQueue``) are in ``olr_buffer.testing``, no longer on
    ``txbuffer``'s face, and no module of the product imports that package."""
    import olr_buffer.txbuffer as txbuffer
    from olr_buffer.testing import MemoryQueue

    assert issubclass(MemoryQueue, txbuffer.TxQueue)
    assert "MemoryQueue" not in txbuffer.__all__ and not hasattr(txbuffer, "MemoryQueue")
    assert _product_imports_of("olr_buffer.testing") == []


def test_names_say_one_thing():
    """One ``status.py`` (the ``status`` command's work; ``cli/`` names its modules after the
    commands), one class named ``Server`` (the PostgreSQL source's server; ``serve``'s is
    ``StreamServer``), "redo" names the redo source only (OpenLogReplicator's requests and
    replies are ``olr_protocol/requests``), and no module reads as a package's module
    (``delta_table.py`` beside ``delta/table.py``)."""
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.suffix in (".py", ".proto")]
    assert [f for f in files if f.rpartition("/")[2] == "status.py" and not f.startswith("cli/")] == ["status.py"]
    assert [f for f in files if "redo" in f and not f.startswith("sources/redo/")] == []
    classes: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(path.relative_to(ROOT).as_posix())
    assert classes["Server"] == ["sources/postgres/connection.py"]
    assert classes["StreamServer"] == ["serve/server.py"]
    stutters = [
        f"{p.parent.parent.relative_to(ROOT)}/{p.parent.name}_{p.name}"
        for p in ROOT.rglob("*.py")
        if (p.parent.parent / f"{p.parent.name}_{p.name}").exists()
    ]
    assert not stutters, stutters
