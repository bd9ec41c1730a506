"""Imports point one way (docs/architecture.md, "Packages"), and no module imports itself
back through another: the joints between packages stay where the diagram draws them."""

from __future__ import annotations

import ast
from pathlib import Path

import olr_buffer

ROOT = Path(olr_buffer.__file__).parent

# a module may import its own package and any layer below its own, never one above or beside
LAYERS = {
    "errors": 0, "faults": 0, "pidlock": 0,
    "txbuffer": 1, "store": 1,
    "changes": 2,
    "reader": 3, "dispatcher": 3, "spark_sink": 3, "sinks": 3,
    "checkpointer": 4, "service": 4, "pipeline": 5, "status": 5, "simulate": 5, "demo": 5,
    "cli": 6,
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


def test_the_record_consumers_do_not_import_the_reader():
    graph = _imports()
    for module, deps in graph.items():
        if module.startswith(("olr_buffer.dispatcher", "olr_buffer.spark_sink")):
            assert not [d for d in deps if d.startswith("olr_buffer.reader")], module


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
