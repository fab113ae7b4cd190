"""The import contract of the layers (docs/architecture.md): each floor imports only the
floors the table below allows. Read from the source with ``ast``, so that imports inside
functions and under ``if TYPE_CHECKING:`` count too: a lazy import is still a dependency,
and a type-only one still couples the layers."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = {
    "kspark": REPO / "sdk" / "kspark",
    "kspark_demo": REPO / "sdk" / "kspark_demo",
    "kspark_server": REPO / "server_plugin" / "kspark_server",
}

#: The floors, each a set of module prefixes (the longest prefix that matches decides).
FLOORS: dict[str, tuple[str, ...]] = {
    # kspark_server's contract modules: the specs, the envelope, the handler API, the
    # codecs, windows and paths, which the client and the workers share
    "shared": tuple(
        f"kspark_server.{m}"
        for m in (
            "spec",
            # the contract's parts, which kspark_server.spec gathers
            "contract",
            "envelope",
            "handlers",
            "codec",
            "windows",
            "paths",
            # the Processor API's types and stores: user code and the client's build-time
            # check of a processor use them too
            "papi",
            "procstores",
        )
    ),
    "server": ("kspark_server",),
    "base": (
        "kspark.errors",
        "kspark._typing",
        "kspark._paths",
        "kspark._deps",
        "kspark._conditions",
    ),
    "plan": ("kspark.plan",),
    "dsl": ("kspark.dsl",),
    "config": ("kspark.config",),
    "bindings": ("kspark.bindings",),
    "compiler": ("kspark.compiler",),
    "runtime": ("kspark.runtime",),
    "testing": ("kspark.testing",),
    "demo": ("kspark_demo",),
    "cli": ("kspark.cli",),
    # kspark/__init__.py: the public names, gathered from every floor
    "package": ("kspark",),
}

#: What each floor may import besides itself.
MAY_IMPORT: dict[str, set[str]] = {
    "shared": set(),
    "server": {"shared"},
    "base": {"shared"},
    "plan": {"base", "shared"},
    "dsl": {"base", "plan", "shared"},
    "config": {"base", "plan"},
    "bindings": {"base", "plan", "config"},
    "compiler": {"base", "plan", "config", "shared", "server"},
    "runtime": {"base", "plan", "config", "bindings", "compiler", "shared", "server"},
    "testing": {"base", "plan", "config", "bindings", "compiler", "runtime", "shared", "server"},
    "demo": {"base", "plan", "dsl", "config", "runtime", "shared"},
    "cli": {"base", "plan", "config", "bindings", "runtime", "demo", "shared"},
    "package": {"base", "plan", "dsl", "config", "runtime", "shared"},
}

#: Imports that break the table today, as (importing floor, imported floor): the reason.
#: An entry that no import needs any more fails the test, so the list stays true.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

#: Third-party packages that a floor never imports, outside ``if TYPE_CHECKING:``.
NEVER_AT_RUNTIME: dict[str, set[str]] = {
    "plan": {"pyspark", "pyarrow", "pandas", "numpy"},
    "dsl": {"pyspark", "pyarrow", "pandas", "numpy"},
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for top, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def floor_of(module: str) -> str | None:
    if module == "kspark_server":  # its __init__ re-exports the spec version only
        return "shared"
    best: tuple[int, str | None] = (-1, None)
    for floor, prefixes in FLOORS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), floor)
    return best[1]


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


#: Where an import runs: when the module loads, only for type checkers, or when called.
LOAD, TYPES, CALL = "load", "types", "call"


def _walk(node: ast.AST, when: str = LOAD) -> Iterator[tuple[ast.AST, str]]:
    for child in ast.iter_child_nodes(node):
        yield child, when
        if _is_type_checking(child):
            assert isinstance(child, ast.If)
            for stmt in child.body:
                yield stmt, TYPES
                yield from _walk(stmt, TYPES)
            for stmt in child.orelse:
                yield stmt, when
                yield from _walk(stmt, when)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, TYPES if when == TYPES else CALL)
        else:
            yield from _walk(child, when)


def imports(module: str) -> Iterator[tuple[str, int, str]]:
    """(imported module, line, when it runs) for every import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, when in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, when
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node.lineno, when


def test_every_module_is_on_a_floor() -> None:
    assert [m for m in MODULES if floor_of(m) is None] == []
    assert set(MAY_IMPORT) == set(FLOORS)


def _breaks(floor: str) -> list[tuple[str, int, str, str]]:
    out = []
    for module in sorted(m for m in MODULES if floor_of(m) == floor):
        for target, line, _ in imports(module):
            other = floor_of(target)
            if other is None or other == floor or other in MAY_IMPORT[floor]:
                continue
            out.append((module, line, target, other))
    return out


@pytest.mark.parametrize("floor", list(FLOORS))
def test_floor_imports_only_the_floors_below(floor: str) -> None:
    wrong = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {target} ({other})"
        for m, line, target, other in _breaks(floor)
        if (floor, other) not in KNOWN_EXCEPTIONS
    ]
    assert wrong == [], f"{floor} may import only {sorted(MAY_IMPORT[floor])}"


def test_known_exceptions_are_still_needed() -> None:
    used = {(floor, other) for floor in FLOORS for *_, other in _breaks(floor)}
    assert set(KNOWN_EXCEPTIONS) - used == set(), "remove the entry and its note in the docs"


@pytest.mark.parametrize("floor", list(NEVER_AT_RUNTIME))
def test_floor_needs_no_spark_nor_arrow(floor: str) -> None:
    wrong = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {target}"
        for m in MODULES
        if floor_of(m) == floor
        for target, line, when in imports(m)
        if when != TYPES and target.split(".")[0] in NEVER_AT_RUNTIME[floor]
    ]
    assert wrong == []


def test_shared_modules_load_no_third_party_package_nor_worker_code() -> None:
    # the plan imports them, so what they import when loaded, the plan loads too
    wrong = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {target}"
        for m in MODULES
        if floor_of(m) == "shared"
        for target, line, when in imports(m)
        if when == LOAD
        and (floor_of(target) == "server" or target.split(".")[0] in NEVER_AT_RUNTIME["plan"])
    ]
    assert wrong == []


def test_the_checker_sees_lazy_and_type_only_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kspark.runtime import app\n"
        "def f():\n    import kspark.compiler.stages\n"
    )
    found = [
        (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name, when)
        for node, when in _walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert found == [("typing", LOAD), ("kspark.runtime", TYPES), ("kspark.compiler.stages", CALL)]


#: The one import circle allowed: ``KStream.group_by_key`` gives a ``KGroupedStream``,
#: whose aggregations give a ``KTable``, so the fluent API's two modules name each other.
#: Every other DSL module builds plan nodes through the interfaces of
#: :mod:`kspark.dsl._building`, and the typed classes wrap what they return.
ALLOWED_CIRCLES = [{"kspark.dsl.streams", "kspark.dsl.grouped"}]


def _circles() -> list[set[str]]:
    """The strongly connected components of more than one module of the import graph
    (every import counts: at load, type-only and inside functions), by Tarjan's
    algorithm."""
    graph = {m: {t for t, _, _ in imports(m) if t in MODULES and t != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return out


def test_the_only_import_circle_is_the_fluent_stream_and_grouped_stream() -> None:
    assert sorted(map(sorted, _circles())) == sorted(map(sorted, ALLOWED_CIRCLES))


@pytest.mark.parametrize("module", ["streamjoin", "globaltable", "_aggregation", "_building"])
def test_dsl_rule_modules_import_no_typed_stream(module: str) -> None:
    # the rules build plan nodes; the fluent classes of streams.py and grouped.py wrap them
    name = f"kspark.dsl.{module}"
    assert name in MODULES
    typed = {"kspark.dsl.streams", "kspark.dsl.grouped"}
    found = [f"{target} (line {line}, {when})" for target, line, when in imports(name)]
    assert [f for f in found if f.split(" ")[0] in typed] == []
