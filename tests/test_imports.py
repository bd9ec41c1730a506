"""Imports point one way (docs/architecture.md, "Packages"), and no module imports itself
back through another: the joints between packages stay where the diagram draws them.
Sources and sinks are reached through their contracts: they do not import each other,
and what wires them reaches no further than a package's face."""

from __future__ import annotations

import ast
from pathlib import Path

import olr_buffer

ROOT = Path(olr_buffer.__file__).parent

# a module may import its own package and any layer below its own, never one above or beside
LAYERS = {
    "errors": 0,
    "faults": 0,
    "pidlock": 0,
    "fsutil": 0,
    "value_forms": 0,
    "compiled": 0,
    "txbuffer": 1,
    "store": 1,
    "changes": 2,
    "dead_letters": 2,
    "olr_protocol": 2,
    "sources": 3,
    "sinks": 3,
    "service": 3,
    # the dispatcher calls a sink through the contract sinks/base.py states
    "dispatcher": 4,
    "serve": 4,
    "mirror": 4,
    # the Spark side applies the mirror's rules (spark_sink/mirror.py)
    "runtime": 5,
    "status": 5,
    "simulate": 5,
    "spark_sink": 5,
    "spark": 6,
    "demo": 7,
    "cli": 8,
    # what the tests and benchmarks run against (a MemoryQueue): above everything, so no
    # module of the product can import it
    "testing": 9,
}

# the doors of sources/ and sinks/: what a module outside a source's (a sink's) package may
# import of it is its package's face, and the shared modules beside the packages
SHARED = {
    "olr_buffer.sources",
    "olr_buffer.sources.base",
    "olr_buffer.sources.running",
    "olr_buffer.sources.runner",
    "olr_buffer.sources.stream",
    "olr_buffer.sources.olr_types",
    "olr_buffer.sources.forkserver_signals",
    "olr_buffer.sinks",
    "olr_buffer.sinks.base",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every olr_buffer module -> the olr_buffer modules it imports (anywhere in it)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def _layer(module: str) -> tuple[str, int]:
    top = module.split(".")[1] if "." in module else ""
    return top, LAYERS[top] if top else -1


def test_every_module_has_a_layer():
    assert {_layer(m)[0] for m in _imports() if m != "olr_buffer"} <= set(LAYERS)


def test_imports_point_down_the_layers():
    wrong = []
    for module, deps in _imports().items():
        if module == "olr_buffer":
            continue
        top, level = _layer(module)
        for dep in deps:
            dep_top, dep_level = _layer(dep)
            if dep_top != top and dep_level >= level:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def _plugin(module: str) -> str | None:
    """``olr_buffer.sources.redo`` for any module of the redo source (a sink's likewise);
    None for a module outside every source and sink package, and for the shared ones."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] in ("sources", "sinks") and module not in SHARED:
        return ".".join(parts[:3])
    return None


def test_the_record_consumers_do_not_import_a_source():
    graph = _imports()
    for module, deps in graph.items():
        if module.startswith(("olr_buffer.dispatcher", "olr_buffer.sinks")):
            assert not [d for d in deps if d.startswith("olr_buffer.sources")], module


def test_the_dispatcher_knows_no_sink_but_the_contract():
    graph = _imports()
    for module, deps in graph.items():
        if module.startswith("olr_buffer.dispatcher"):
            assert not [d for d in deps if d.startswith("olr_buffer.sinks") and d != "olr_buffer.sinks.base"], module


def test_the_change_format_is_imported_through_its_face():
    """``olr_buffer.changes`` is one face over its modules (codes, payloads, blocks,
    commits, schemas): a module outside the package imports the package, never one of them."""
    wrong = []
    for module, deps in _imports().items():
        if module.startswith("olr_buffer.changes"):
            continue
        wrong += [f"{module} imports {d}" for d in deps if d.startswith("olr_buffer.changes.")]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_change_format_package_is_a_face_over_modules_of_the_format_only():
    """``changes/__init__.py`` defines nothing (it re-exports; the names of ``columns``
    through a module ``__getattr__``, so that pyarrow loads only where they are used), and
    no module of it states a consumer's contract (a ``Protocol``: the dispatcher's sink is
    in ``sinks/base.py``)."""
    face = ast.parse((ROOT / "changes" / "__init__.py").read_text())
    defined = [
        n
        for n in face.body
        if (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name != "__getattr__")
        or (isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] != ["__all__"])
    ]
    assert not defined, [getattr(n, "name", None) or ast.unparse(n)[:60] for n in defined]
    protocols = []
    for path in (ROOT / "changes").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("Protocol") for b in node.bases):
                protocols.append(f"{path.name}: {node.name}")
    assert not protocols, protocols


def test_sources_and_sinks_do_not_import_each_other():
    wrong = []
    for module, deps in _imports().items():
        mine = _plugin(module)
        for dep in deps:
            theirs = _plugin(dep)
            if theirs is not None and mine is not None and theirs != mine:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_only_package_faces_are_imported_from_outside_a_source_or_sink():
    """The runtime, status, the CLI ... take a source or a sink by its package's face
    (``olr_buffer.sinks.parquet``), never one of its modules (``...parquet.writer``)."""
    wrong = []
    for module, deps in _imports().items():
        for dep in deps:
            theirs = _plugin(dep)
            if theirs is not None and dep != theirs and _plugin(module) != theirs:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_module_imports_a_private_name_of_another():
    wrong = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("", "olr_buffer"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        wrong.append(f"{path.relative_to(ROOT.parent)}: {node.module} import {alias.name}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle():
    graph = _imports()
    # a package's __init__ re-exports its modules: an edge into a package is an edge
    # into what its __init__ imports, which the walk follows
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycle = path[path.index(d) :] + [d]
                # a module importing its own package's __init__ (which imports it back) is
                # how packages are built, not a cycle between modules
                if not (len(cycle) == 3 and cycle[1].startswith(cycle[0] + ".")):
                    raise AssertionError("import cycle: " + " -> ".join(cycle))
            elif state.get(d) is None:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if state.get(m) is None:
            visit(m)


def test_a_command_of_the_cli_imports_no_other_command():
    """``olr_buffer/cli/``: one module a command, standing on what the commands share
    (the group, the shared options, progress, signals, the pandas hook), never on another command."""
    shared = {f"olr_buffer.cli.{m}" for m in ("common", "group", "progress", "signals", "pandas_probe", "__main__")} | {
        "olr_buffer.cli"
    }
    graph = _imports()
    commands = {m for m in graph if m.startswith("olr_buffer.cli.") and m not in shared}
    assert commands, "no command module under olr_buffer/cli/"
    wrong = [f"{m} imports {d}" for m in commands for d in graph[m] if d in commands]
    assert not wrong, "\n".join(sorted(wrong))
