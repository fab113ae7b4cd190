"""The DSL ends of the Processor API: what ``KStream.process``, ``process_values`` and
``StreamsBuilder.add_state_store``/``build`` do with processors and their stores."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import attrs

from kspark.dsl import _infer
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import graph
from kspark.plan import nodes as n
from kspark.plan.processing import GlobalStoreSource, Process, StoreDef
from kspark.plan.topology import _new_parents
from kspark_server.papi import (
    Cancellable,
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    Processor,
    ProcessorContext,
    PunctuationType,
    RecordMetadata,
    StateStoreError,
)
from kspark_server.procstores import MemoryTable, ReadOnlyKVStore, store_for

__all__ = ["check_supplier", "connect_stores", "output_hints"]


def check_supplier(supplier: Any, fixed_key: bool, processor: str) -> None:
    """A supplier is a processor class, or a callable of no argument returning one."""
    want = FixedKeyProcessor if fixed_key else Processor
    if isinstance(supplier, type):
        if not issubclass(supplier, want):
            raise InvalidArgumentError(
                f"{processor}: {'process_values' if fixed_key else 'process'} takes a "
                f"{want.__name__} class or a function returning a new {want.__name__}, got "
                f"the class {supplier.__qualname__}",
                processor=processor,
                parameter="supplier",
            )
        return
    if isinstance(supplier, Processor | FixedKeyProcessor):
        raise InvalidArgumentError(
            f"{processor}: pass the processor's class or a function making a new one, not an "
            "instance: each task needs its own processor (Kafka Streams' ProcessorSupplier)",
            processor=processor,
            parameter="supplier",
        )
    _infer.check_callable(supplier, "supplier", processor)


def _generic_args(cls: type, base: type) -> tuple[Any, ...] | None:
    for klass in cls.__mro__:
        for b in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(b) is base:
                return typing.get_args(b)
    return None


def output_hints(supplier: Any, fixed_key: bool) -> tuple[Any, Any]:
    """The forwarded key and value types a processor class declares through its generic
    base (``Processor[KIn, VIn, KOut, VOut]``), or None for each it does not."""
    cls = supplier if isinstance(supplier, type) else _infer.return_hint(supplier)
    if not isinstance(cls, type):
        return None, None
    args = _generic_args(cls, FixedKeyProcessor if fixed_key else Processor)
    if args is None:
        return None, None

    def concrete(t: Any) -> Any:
        return None if isinstance(t, typing.TypeVar) or t is Any else t

    if fixed_key:
        return None, concrete(args[2])
    return concrete(args[2]), concrete(args[3])


def check_store_names(names: Iterable[Any], processor: str) -> tuple[str, ...]:
    out = tuple(names)
    for s in out:
        if not isinstance(s, str) or not s.strip():
            raise InvalidArgumentError(
                f"{processor}: store names are non-empty strs, got {s!r}",
                processor=processor,
                parameter="store_names",
            )
    return out


class _ProbeContext(ProcessorContext[Any, Any], FixedKeyProcessorContext[Any, Any]):
    """The context of the build-time run of a processor's ``init``: it gives the stores
    the processor is connected to (empty) and refuses the others."""

    def __init__(self, node: Process, global_stores: dict[str, GlobalStoreSource]) -> None:
        self._node = node
        self._defs = {d.name: d for d in node.store_defs}
        self._globals = global_stores
        self._table = MemoryTable()
        #: the global stores ``init`` asked for
        self.asked: set[str] = set()

    @property
    def application_id(self) -> str:
        return ""

    @property
    def task_id(self) -> str:
        return "0_0"

    def forward(self, record: Any, child_name: str | None = None) -> None:
        pass

    def schedule(self, interval: timedelta, type: PunctuationType, punctuator: Any) -> Cancellable:
        return _NoSchedule()

    def get_state_store(self, name: str) -> Any:
        d = self._defs.get(name)
        g = self._globals.get(name)
        if d is None and g is not None:
            self.asked.add(name)
            store = g.store
            return ReadOnlyKVStore(
                store_for(
                    "key_value",
                    name,
                    self._table,
                    store.key_type.spec(),
                    store.value_type.spec(),
                    {},
                ),
                self._node.name,
            )
        if d is None:
            raise StateStoreError(
                f"processor {self._node.name} asks for state store {name!r} in init, but "
                f"it is not connected to the processor (connected: "
                f"{sorted(self._node.store_names)}); add it with "
                f"StreamsBuilder.add_state_store(...) and name it: process(supplier, {name!r}), "
                "or add a global store of that name (StreamsBuilder.add_global_store)"
            )
        return store_for(
            d.kind,
            name,
            self._table,
            d.key_type.spec(),
            d.value_type.spec(),
            {},
            history_retention_ms=d.history_retention_ms,
            retention_ms=d.retention_ms,
            retain_duplicates=d.retain_duplicates,
        )

    def record_metadata(self) -> RecordMetadata | None:
        return None

    def current_stream_time_ms(self) -> int:
        return -1

    def current_system_time_ms(self) -> int:
        return 0


class _NoSchedule(Cancellable):
    def cancel(self) -> None:
        pass


def _probe(node: Process, global_stores: dict[str, GlobalStoreSource]) -> set[str]:
    """Run the processor's ``init`` against a context of its connected stores: a store it
    asks for but is not connected to fails the build, as Kafka Streams fails the task.
    Any other failure of ``init`` is the task's to report when it runs. Returns the
    global stores ``init`` asked for: the processor reads those."""
    context = _ProbeContext(node, global_stores)
    try:
        processor = node.supplier()
        processor.init(context)
    except StateStoreError as exc:
        raise InvalidTopologyError(str(exc), processor=node.name) from exc
    except Exception:
        pass
    return context.asked


def connect_stores(
    sinks: tuple[n.Node, ...],
    stores: dict[str, StoreDef],
    global_stores: dict[str, GlobalStoreSource] | None = None,
) -> tuple[n.Node, ...]:
    """The topology's sinks and ends (``sinks``) with every processor's store definitions
    filled in from the builder's ``stores``, and its global stores (those its ``init``
    asks for, or that it names) from ``global_stores``; a name no store has fails the
    build."""
    globals_ = global_stores or {}
    used: set[str] = set()

    def remap(node: n.Node, new: Callable[[n.Node], n.Node]) -> n.Node:
        changes = _new_parents(node, new)
        if isinstance(node, Process):
            missing = [s for s in node.store_names if s not in stores and s not in globals_]
            if missing:
                raise InvalidTopologyError(
                    f"{node.name}: state store(s) {missing} are connected to the processor but "
                    f"were never added; add each with StreamsBuilder.add_state_store("
                    "Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "
                    f"...)) (added: {sorted(stores)})",
                    processor=node.name,
                )
            used.update(node.store_names)
            changes["store_defs"] = tuple(stores[s] for s in node.store_names if s in stores)
            connected = attrs.evolve(node, **changes)
            named = {s for s in node.store_names if s in globals_}
            read = sorted(_probe(connected, globals_) | named)
            if len(read) > 1:
                raise InvalidTopologyError(
                    f"{node.name}: the processor reads global stores {read}; a kspark "
                    "processor reads at most one global store",
                    processor=node.name,
                )
            changes["global_stores"] = tuple(globals_[g] for g in read)
        return attrs.evolve(node, **changes) if changes else node

    roots: tuple[n.Node, ...] = sinks
    new = graph.map_nodes(roots, lambda x: x.parents, remap)
    return tuple(new(s) for s in sinks)
