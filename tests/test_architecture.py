"""The layout's rules, checked from the source (no Spark): which folder may import which,
no import cycles, no grab-bag modules. docs/architecture.md explains the layers.

Imports are read with ``ast`` -- those inside functions included, since a function-level
import that closes a cycle is still a cycle (it only moves the failure to run time).
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
#: Source folder -> installed package (pyproject.toml's package-dir).
FOLDERS = {"wavesql": "wavesql", "catalog": "wavesql.catalog", "planner": "wavesql.planner",
           "udfs": "wavesql.udfs", "sources": "wavesql.sources",
           "streaming": "wavesql.streaming", "storage": "wavesql.storage"}

#: Layers, lowest first: a module may import its own layer and those below, never above.
#: ``base`` modules import nothing of WaveSQL's but each other.
LAYERS = [
    ("base", ("wavesql.errors", "wavesql.sqltext", "wavesql.settings",
              "wavesql.spark_errors", "wavesql.faults")),
    ("core", ("wavesql.udfs", "wavesql.storage", "wavesql.dialect")),
    ("catalog", ("wavesql.catalog",)),
    ("sources", ("wavesql.sources",)),
    ("planner", ("wavesql.planner",)),
    ("streaming", ("wavesql.streaming",)),
    ("front", ("wavesql",)),  # the session, jobs, REPL, notebook, CLI, demo
]

#: A module over this many lines is a grab-bag to split.
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The WaveSQL modules ``name`` imports (anywhere in it)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            targets = [s for s in subs if s in MODULES]
            if len(targets) < len(subs):
                targets.append(base)
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                out.add(target)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    return best


def test_the_module_list_is_read():
    # the rules below would pass vacuously over an empty or partial tree
    assert {"wavesql.planner.lower", "wavesql.streaming.runner", "wavesql.udfs.registry",
            "wavesql.dialect"} <= set(MODULES)
    assert "wavesql.planner.ir" in GRAPH["wavesql.planner.lower"]


def test_no_module_imports_a_layer_above_its_own():
    wrong = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
                   if _layer(t) > _layer(m))
    assert not wrong, "imports against the layers (docs/architecture.md):\n" + "\n".join(wrong)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_grab_bag_modules():
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over = sorted(f"{name}: {n} lines" for name, n in sizes.items() if n > MAX_LINES)
    assert not over, f"split these modules (at most {MAX_LINES} lines):\n" + "\n".join(over)
