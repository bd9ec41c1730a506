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
    "errors": 0, "faults": 0, "pidlock": 0,
    "txbuffer": 1, "store": 1,
    "changes": 2, "dead_letters": 2, "olr_protocol": 2,
    "sources": 3, "dispatcher": 3, "sinks": 3,
    "checkpointer": 4, "service": 4, "spark": 4, "serve": 4,
    "pipeline": 5, "status": 5, "simulate": 5, "demo": 5, "spark_sink": 5,
    "cli": 6,
}

# the doors of sources/ and sinks/: what a module outside a source's (a sink's) package may
# import of it is its package's face, and the shared modules beside the packages
SHARED = {"olr_buffer.sources", "olr_buffer.sources.base", "olr_buffer.sources.running", "olr_buffer.sources.runner",
          "olr_buffer.sources.stream", "olr_buffer.sources.olr_types", "olr_buffer.sources.forkserver_signals",
          "olr_buffer.sinks", "olr_buffer.sinks.base"}


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
            assert not [d for d in deps if d.startswith("olr_buffer.sinks")], module


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
    """The pipeline, status, the CLI ... take a source or a sink by its package's face
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
                cycle = path[path.index(d):] + [d]
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
