"""Shipping code to the server's Python workers.

``SparkSession.addArtifacts(pyfile=True)`` does not reach the Python workers of streaming
queries (spark-notes, verified on Spark 4.3), so kspark's code travels in the pickled
functions of each query's plan. ``kspark_server`` travels as a bundle
(:mod:`kspark.compiler.bundle`): every object kspark hands to pyspark names the operators' code
by reference and, where the workers lack the client's very ``kspark_server`` (the same
sources: :func:`kspark.runtime.workers.same_server_code`; :func:`server_code`), carries
the compressed sources of the modules it needs, which a small bootstrap installs in the
worker before the object loads. The handler module ``kspark.errors`` and every module
that defines a function or a type the topology uses and that is not part of an installed
distribution (the demo app, ``kspark_demo``, is such user code) are pickled by value. A
server that cannot import any of these still runs the app.

A local module is shipped with its whole top-level package (``mypkg`` for ``mypkg.topo``):
cloudpickle pickles by value every module under a registered package, so helpers that the
topology's functions call from sibling modules (``mypkg.helpers``) reach the server too,
although they appear nowhere in the plan.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from kspark.compiler import bundle as _bundle
from kspark.errors import CodeShippingError
from kspark.plan import nodes as n
from kspark.plan.topology import Topology
from kspark.plan.types import ListType, MapType, Record, TypeDesc

__all__ = ["modules_to_ship", "server_code", "ship"]

_ALWAYS = ("kspark.errors",)


@functools.cache  # the interpreter's install locations do not change while it runs
def _installed_roots() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(p) for p in paths if p)


def _is_local(module: ModuleType) -> bool:
    if module.__name__ == "__main__":
        return False  # cloudpickle already pickles __main__ by value
    if module.__name__.split(".")[0] in ("kspark", "pyspark", "builtins"):
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return False
    real = os.path.realpath(path)
    return not any(real.startswith(root + os.sep) for root in _installed_roots())


def _is_local_package(module: ModuleType) -> bool:
    """A package (or a namespace package) whose files are outside installed locations."""
    if _is_local(module):
        return True
    paths = list(getattr(module, "__path__", None) or [])
    if not paths or module.__name__.split(".")[0] in ("kspark", "pyspark"):
        return False
    roots = _installed_roots()
    return all(not os.path.realpath(p).startswith(root + os.sep) for p in paths for root in roots)


def _ship_unit(module: ModuleType) -> str:
    """The name to register for ``module``: its top-level package if that is local too."""
    top = module.__name__.split(".")[0]
    root = sys.modules.get(top)
    if root is not None and root is not module and _is_local_package(root):
        return top
    return module.__name__


def _types(desc: TypeDesc | None) -> Iterator[type]:
    if isinstance(desc, Record):
        yield desc.cls
        for f in desc.fields:
            yield from _types(f.type)
    elif isinstance(desc, ListType):
        yield from _types(desc.element)
    elif isinstance(desc, MapType):
        yield from _types(desc.key)
        yield from _types(desc.value)


def _objects(topology: Topology, extra: Iterable[Any]) -> Iterator[Any]:
    for node in topology.nodes():
        yield from _types(node.key_type)
        yield from _types(node.value_type)
        for d in getattr(node, "store_defs", ()):  # a processor's stores (their types)
            yield from _types(d.key_type)
            yield from _types(d.value_type)
        for attr in ("fn", "joiner", "id_selector", "supplier", "update_supplier"):
            value = getattr(node, attr, None)
            if value is not None:
                yield value
        if isinstance(node, n.Branch):
            yield from node.predicates
    yield from extra


def modules_to_ship(
    topology: Topology, extra: Iterable[Any] = (), names: Iterable[str] = ()
) -> list[str]:
    """Names of the modules to pickle by value for ``topology``.

    ``names`` are modules to ship in any case, such as the module a ``module:attr``
    reference named; like the modules found in the topology, a local one is shipped with
    its top-level package.
    """
    found: set[str] = set(_ALWAYS)
    for name in names:
        module = sys.modules.get(name)
        found.add(_ship_unit(module) if module is not None and _is_local(module) else name)
    for obj in _objects(topology, extra):
        if obj is None:
            continue
        if isinstance(obj, type) or hasattr(obj, "__code__"):
            mod_name = getattr(obj, "__module__", None)  # a class or a function
        else:
            mod_name = type(obj).__module__  # an instance, such as a handler or a callable
        module = sys.modules.get(mod_name or "")
        if module is not None and _is_local(module):
            found.add(_ship_unit(module))
    return sorted(found)


def ship(topology: Topology, extra: Iterable[Any] = (), names: Iterable[str] = ()) -> list[str]:
    """Register the topology's code to be pickled by value, and ``kspark_server`` to
    travel in bundles (until :func:`server_code` finds the workers have it); returns the
    names of the modules shipped: ``kspark_server`` and those pickled by value."""
    from pyspark import cloudpickle

    server_code(by_reference=False)
    shipped = modules_to_ship(topology, extra, names)
    for name in shipped:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise CodeShippingError(
                f"cannot import module {name!r} to ship it: {exc}", module=name
            ) from exc
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return sorted({*shipped, "kspark_server"})


def server_code(by_reference: bool) -> None:
    """Ship ``kspark_server`` by reference (the workers have these very sources) or in
    bundles (they have none, or other ones): :func:`kspark.compiler.bundle.shipped`."""
    from pyspark import cloudpickle

    import kspark_server

    # never by value in every function: a bundle carries it where it is needed
    if "kspark_server" in cloudpickle.list_registry_pickle_by_value():  # type: ignore[no-untyped-call]
        cloudpickle.unregister_pickle_by_value(kspark_server)  # type: ignore[no-untyped-call]
    _bundle.set_by_value(not by_reference)
