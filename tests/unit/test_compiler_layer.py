"""The compiler sits below the runtime: nothing in it imports ``kspark.runtime`` (not even
for type checking), and the lowering is split by kind of stage into modules a reader can
take in whole."""

from __future__ import annotations

import ast
import pathlib

import kspark.compiler


def _modules() -> list[pathlib.Path]:
    return sorted(pathlib.Path(kspark.compiler.__file__).parent.rglob("*.py"))


def _imported(path: pathlib.Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_the_compiler_never_imports_the_runtime() -> None:
    for path in _modules():
        upward = [
            n for n in _imported(path) if n == "kspark.runtime" or n.startswith("kspark.runtime.")
        ]
        assert not upward, (path, upward)


def test_no_lowering_module_is_long() -> None:
    lowering = pathlib.Path(kspark.compiler.__file__).parent / "lowering"
    for path in lowering.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path
