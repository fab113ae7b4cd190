"""The worker side of a code bundle: install ``kspark_server`` from the bundle a Python
function carries, then load the function.

This module travels by value in each bundled function (:mod:`kspark.compiler.bundle`), to
workers that cannot import ``kspark``: it uses the standard library (and pyspark) only, and keeps its
state in ``sys.meta_path`` (its finder), never in its own globals, which are a fresh copy
in every function unpickled.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import lzma
import pickle
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["install", "load", "ship_instance"]

#: The root package a bundle holds.
ROOT = "kspark_server"


class BundleFinder:
    """Finds and loads the modules of ``kspark_server`` from bundled sources.

    ``sources`` maps a module's name to ``(is_package, source)``; ``keys`` are the
    bundles already merged in (each bundle of a digest holds the modules one function
    needs, and several functions share one worker process).
    """

    def __init__(self, digest: str) -> None:
        self.kspark_bundle_digest = digest
        self.sources: dict[str, tuple[bool, str]] = {}
        self.keys: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        entry = self.sources.get(fullname)
        if entry is None:
            # not in the bundle: not found, and never the worker's own copy either (the
            # bundle's packages have no path to search)
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=entry[0])  # type: ignore[arg-type]

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        is_package, source = self.sources[name]
        tail = "/__init__.py" if is_package else ".py"
        filename = (
            f"<kspark bundle {self.kspark_bundle_digest[:12]}>/{name.replace('.', '/')}{tail}"
        )
        exec(compile(source, filename, "exec"), module.__dict__)

    def get_source(self, fullname: str) -> str | None:
        entry = self.sources.get(fullname)
        return None if entry is None else entry[1]

    def is_package(self, fullname: str) -> bool:
        return self.sources[fullname][0]


def _finder() -> Any:
    for f in sys.meta_path:
        if hasattr(f, "kspark_bundle_digest"):
            return f
    return None


def install(key: str, digest: str, bundle: bytes) -> None:
    """Make ``kspark_server`` importable from ``bundle`` (lzma-compressed JSON: module
    name to ``[is_package, source]``) in this process.

    A bundle already merged in (its ``key``) costs nothing. A ``kspark_server`` of
    another digest (the worker's own, or an earlier client's bundle) gives way: its
    modules leave ``sys.modules``, so that this function runs the client's code.
    """
    finder = _finder()
    if finder is not None and finder.kspark_bundle_digest == digest:
        if key in finder.keys:
            return
    else:
        if finder is not None:
            sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m == ROOT or m.startswith(ROOT + ".")]:
            del sys.modules[name]
        finder = BundleFinder(digest)
        sys.meta_path.insert(0, finder)
        importlib.invalidate_caches()
    for name, (is_package, source) in json.loads(lzma.decompress(bundle)).items():
        finder.sources[name] = (bool(is_package), source)
    finder.keys.add(key)


def load(key: str, digest: str, bundle: bytes, payload: bytes) -> Any:
    """The object pickled in ``payload`` (its ``kspark_server`` code by reference), once
    the bundle is installed."""
    install(key, digest, bundle)
    return pickle.loads(payload)


def ship_instance(obj: Any, key: str, digest: str, bundle: bytes) -> Any:
    """``obj``, an object of ``kspark_server`` made in this worker, made to pickle with
    its bundle: the process that unpickles it (an executor's worker that reads a data
    source's partition, say) installs the bundle before it loads ``obj``'s class.

    ``obj`` keeps its class's behaviour and ``isinstance`` checks: its class becomes a
    subclass that differs only in how it pickles.
    """
    base = type(obj)

    def __reduce__(self: Any) -> tuple[Any, tuple[Any, ...]]:
        plain = object.__new__(base)
        plain.__dict__.update(self.__dict__)
        # pyspark's cloudpickle (every Python worker has pyspark), as pyspark pickles
        from pyspark import cloudpickle

        payload: bytes = cloudpickle.dumps(plain)  # type: ignore[no-untyped-call]
        return load, (key, digest, bundle, payload)

    obj.__class__ = type(
        base.__name__,
        (base,),
        {
            "__reduce__": __reduce__,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
        },
    )
    return obj
