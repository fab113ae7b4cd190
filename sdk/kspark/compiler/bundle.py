"""Shipping ``kspark_server`` to workers that lack it: one compact bundle per function.

Every Python object kspark hands to pyspark for the workers (a ``mapInArrow`` function,
a stateful processor, an ``applyInPandasWithState`` function, the ``foreachBatch``
writer) goes through :func:`shipped`. Where the workers import this client's very
``kspark_server`` (:func:`set_by_value` ``False``), the object is pickled as it is, its
``kspark_server`` code by reference. Where they do not, the object is pickled by
reference too, inside a small bootstrap (:mod:`kspark.compiler.bootstrap`, by value) that
carries the sources of the ``kspark_server`` modules the object needs (their import
closure, docstrings and comments removed, lzma-compressed) and installs them in the
worker through an in-memory importer before it loads the object. A worker installs a
bundle once per process: the functions that follow it with the same sources skip it.

The sources keep their line numbers (a removed docstring leaves blank lines), so a
worker's traceback names the lines of the client's files.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import io
import json
import lzma
import operator
import os
import tokenize
from typing import Any, TypeVar, cast

__all__ = ["bundle_for", "by_value", "set_by_value", "shipped", "shipped_data_source", "sources"]

T = TypeVar("T")

ROOT = "kspark_server"

_state = {"by_value": True}


def set_by_value(flag: bool) -> None:
    """Whether the workers need ``kspark_server`` shipped (they lack the client's)."""
    _state["by_value"] = flag


def by_value() -> bool:
    """Whether :func:`shipped` objects carry their ``kspark_server`` bundle."""
    return _state["by_value"]


def _strip(source: str) -> str:
    """``source`` without its docstrings and comments, on the same lines."""
    lines = [line.encode() for line in source.splitlines(keepends=True)]
    # (first line, first byte, last line, end byte, is a comment): ast counts bytes
    cut: list[tuple[int, int, int, int, bool]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                v = first.value
                assert v.end_lineno is not None and v.end_col_offset is not None
                cut.append((v.lineno, v.col_offset, v.end_lineno, v.end_col_offset, False))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            (row, col), text = tok.start, tok.line
            start = len(text[:col].encode())
            cut.append((row, start, row, len(lines[row - 1].rstrip(b"\r\n")), True))
    # from the end, so that earlier positions stay valid; a docstring's lines are kept
    # (an empty string in parentheses) so that every line keeps its number
    for l0, c0, l1, c1, is_comment in sorted(cut, reverse=True):
        head, tail = lines[l0 - 1][:c0], lines[l1 - 1][c1:]
        filler = b"" if is_comment else (b"(''" + b"\n" * (l1 - l0) + b")" if l1 > l0 else b"''")
        lines[l0 - 1 : l1] = [head + filler + tail]
    out = b"".join(lines).decode()
    return "\n".join(line.rstrip() for line in out.split("\n"))


@functools.cache  # the client's sources do not change while it runs
def sources() -> dict[str, tuple[bool, str]]:
    """The client's ``kspark_server``: module name to ``(is_package, stripped source)``."""
    import kspark_server

    top = os.path.dirname(kspark_server.__file__)
    found: dict[str, tuple[bool, str]] = {}
    for dirpath, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), os.path.dirname(top))
            module = rel[:-3].replace(os.sep, ".")
            is_package = module.endswith(".__init__")
            if is_package:
                module = module[: -len(".__init__")]
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                found[module] = (is_package, _strip(f.read()))
    return found


@functools.cache
def digest() -> str:
    """The digest of the client's ``kspark_server`` (the worker check's fingerprint)."""
    import kspark_server
    from kspark_server.probe import code_fingerprint

    return code_fingerprint(os.path.dirname(kspark_server.__file__))


@functools.cache
def _imports(module: str) -> frozenset[str]:
    """The ``kspark_server`` modules ``module`` imports, at its top or in a function."""
    is_package, source = sources()[module]
    base = module if is_package else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                b = base
                for _ in range(node.level - 1):
                    b = b.rpartition(".")[0]
                m = f"{b}.{node.module}" if node.module else b
            else:
                m = node.module or ""
            named.add(m)
            named.update(f"{m}.{a.name}" for a in node.names)  # a submodule, maybe
    return frozenset(m for m in named if m in sources())


def closure(modules: set[str]) -> set[str]:
    """``modules`` with their packages and every module they import, transitively."""
    known = sources()
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        m = todo.pop()
        if m in seen or m not in known:
            continue
        seen.add(m)
        parts = m.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(_imports(m))
    return seen


@functools.cache  # one bundle per set of modules: the plan's functions share a few
def _bundle(modules: frozenset[str]) -> tuple[str, bytes]:
    known = sources()
    body = json.dumps({m: known[m] for m in sorted(modules)}, separators=(",", ":"))
    blob = lzma.compress(body.encode(), preset=9 | lzma.PRESET_EXTREME)
    key = hashlib.sha256(f"{digest()}\0{sorted(modules)}".encode()).hexdigest()[:24]
    return key, blob


def bundle_for(payload: bytes) -> tuple[str, bytes]:
    """The bundle (its key and compressed sources) of the ``kspark_server`` modules that
    ``payload``, a pickle of ``kspark_server`` code by reference, names (nested pickles
    included), with what they import."""
    named = {m for m in sources() if m.encode() in payload}
    return _bundle(frozenset(closure(named | {ROOT})))


def _packed(obj: Any) -> tuple[str, str, bytes, bytes]:
    """``obj`` pickled with its ``kspark_server`` code by reference, and the bundle that
    code needs: the arguments of :func:`kspark.compiler.bootstrap.load` after the first."""
    from pyspark import cloudpickle

    import kspark_server
    from kspark.compiler import bootstrap as _bootstrap

    if ROOT in cloudpickle.list_registry_pickle_by_value():  # type: ignore[no-untyped-call]
        cloudpickle.unregister_pickle_by_value(kspark_server)  # type: ignore[no-untyped-call]
    cloudpickle.register_pickle_by_value(_bootstrap)  # type: ignore[no-untyped-call]
    payload: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    key, blob = bundle_for(payload)
    return key, digest(), blob, payload


class Shipped:
    """``obj`` for pyspark: called, inspected and pickled as the workers need it."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.obj(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        # pyspark checks a function's parameters (getfullargspec) before it pickles it
        return inspect.signature(self.obj)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__name__":
            raise AttributeError(name)
        return getattr(self.obj, name)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if not by_value():
            # the workers import kspark_server: the object itself, nothing around it
            return operator.itemgetter(0), ((self.obj,),)
        from kspark.compiler import bootstrap as _bootstrap

        return _bootstrap.load, _packed(self.obj)


def shipped(obj: T) -> T:
    """``obj`` (a function or a processor) as kspark hands it to pyspark: pickled with the
    ``kspark_server`` bundle its code needs where the workers lack the client's."""
    # typed as the object: pyspark's signatures want functions and processors
    return cast(T, Shipped(obj))


def shipped_data_source(cls: type[T]) -> type[T]:
    """``cls``, a Python data source of ``kspark_server``, as kspark registers it with
    the session: where the workers lack the client's ``kspark_server``, a stand-in class
    (pickled by value) that installs the bundle before it makes ``cls``, and ships the
    readers and writers it hands to Spark with the bundle too (they travel to executors
    and to the driver's source and sink runners, each a process of its own)."""
    if not by_value():
        return cls
    from pyspark.sql.datasource import DataSource

    from kspark.compiler import bootstrap as _bootstrap

    key, code, blob, payload = _packed(cls)
    load, ship = _bootstrap.load, _bootstrap.ship_instance
    source_name: str = cls.name()  # type: ignore[attr-defined]

    # the stand-in holds only its options: Spark pickles the instance too, and a process
    # that unpickles it may not have installed the bundle yet
    class ShippedDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return source_name

        def _inner(self) -> Any:
            return load(key, code, blob, payload)(self.options)

        def schema(self) -> Any:
            return self._inner().schema()

        def reader(self, schema: Any) -> Any:
            return ship(self._inner().reader(schema), key, code, blob)

        def streamReader(self, schema: Any) -> Any:
            return ship(self._inner().streamReader(schema), key, code, blob)

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return ship(self._inner().writer(schema, overwrite), key, code, blob)

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            return ship(self._inner().streamWriter(schema, overwrite), key, code, blob)

    ShippedDataSource.__qualname__ = ShippedDataSource.__name__ = cls.__name__
    return cast(type[T], ShippedDataSource)
