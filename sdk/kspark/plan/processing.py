"""Plan nodes of the Processor API: :class:`Process` (``KStream.process``),
:class:`ProcessValues` (``KStream.process_values``) and the state stores they use
(:class:`StoreDef`, added with ``StreamsBuilder.add_state_store``).

A processor's stores are connected by name when the stream is built; the builder fills
in their definitions (:func:`with_store_defs`) when the topology is built, so a store may
be added before or after the processor that names it.

Examples
--------
>>> from kspark.plan.types import describe_type
>>> d = StoreDef(name="counts", kind="key_value", key_type=describe_type(str),
...              value_type=describe_type(int))
>>> d.kind, d.logging
('key_value', True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import attrs

from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.nodes import GlobalTableSource, Node, TableSource, _Unary
from kspark.plan.types import DYNAMIC, TypeDesc

__all__ = [
    "GlobalStoreSource",
    "Process",
    "ProcessValues",
    "StoreDef",
    "StoreKind",
    "is_global_source",
]

StoreKind = Literal["key_value", "versioned", "window"]

#: What a processor compiles to (``describe()`` shows it).
OPERATOR = "kspark task operator (per-task state)"


@attrs.frozen(kw_only=True)
class StoreDef:
    """A state store of processors: its name, kind and types, and the kind's settings.

    ``in_memory`` stores are kept as the persistent ones are (kspark has one store
    engine); ``logging`` records ``with_logging_disabled()`` and changes nothing at run
    time: every processor store's changes go to the task's durable state.
    """

    name: str
    kind: StoreKind
    key_type: TypeDesc = DYNAMIC
    value_type: TypeDesc = DYNAMIC
    in_memory: bool = False
    logging: bool = True
    history_retention_ms: int = 0
    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.name.strip():
            raise InvalidArgumentError("a state store needs a name", parameter="name")
        if self.kind not in ("key_value", "versioned", "window"):
            raise InvalidArgumentError(
                f"store {self.name!r}: unknown store kind {self.kind!r}", parameter="kind"
            )
        for what in ("history_retention_ms", "retention_ms", "window_size_ms"):
            if getattr(self, what) < 0:
                raise InvalidArgumentError(
                    f"store {self.name!r}: {what[:-3]} must not be negative", parameter=what
                )
        if self.kind == "window" and (
            self.window_size_ms <= 0 or self.retention_ms < self.window_size_ms
        ):
            raise InvalidArgumentError(
                f"store {self.name!r}: a window store needs a positive window size and a "
                f"retention of at least the window size (got size {self.window_size_ms} ms, "
                f"retention {self.retention_ms} ms)",
                parameter="retention",
            )


Fn = Callable[..., Any]


@attrs.frozen(kw_only=True)
class GlobalStoreSource(TableSource):
    """The source of a global store (``StreamsBuilder.add_global_store``): a key-value
    store that every task's processors read, fed by a topic through
    ``update_supplier``'s processor (None: put each record, delete on a null value).

    A processor reads it when its ``init`` asks for it (``context.get_state_store``);
    such a processor has the source among its parents (``Process.global_stores``).
    """

    store: StoreDef
    update_supplier: Fn | None = None

    def __attrs_post_init__(self) -> None:
        if self.store.kind != "key_value":
            raise InvalidTopologyError(
                f"{self.name}: global store {self.store.name!r} is a {self.store.kind} store; "
                "a global store is a key-value store (Stores.key_value_store_builder)",
                processor=self.name,
            )

    def stores(self) -> tuple[str, ...]:
        return (self.store.name,)


def is_global_source(node: Node) -> bool:
    """Whether ``node`` is the source of a global table or a global store: read whole by
    every task, so it starts no task of its own."""
    return isinstance(node, GlobalTableSource | GlobalStoreSource)


@attrs.frozen(kw_only=True)
class Process(_Unary):
    """Runs a user :class:`kspark.processor.Processor` per task (``KStream.process``).

    ``supplier()`` makes a new processor; ``store_names`` are the stores it may read and
    write, ``store_defs`` their definitions (filled in by ``StreamsBuilder.build``). The
    processor may forward any key, so the next stateful step repartitions."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    supplier: Fn
    store_names: tuple[str, ...] = ()
    store_defs: tuple[StoreDef, ...] = ()
    #: the global stores the processor reads (found when the topology is built)
    global_stores: tuple[GlobalStoreSource, ...] = ()

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.parent, *self.global_stores)

    def __attrs_post_init__(self) -> None:
        dupes = sorted({s for s in self.store_names if self.store_names.count(s) > 1})
        if dupes:
            raise InvalidTopologyError(
                f"{self.name}: store names given more than once: {dupes}", processor=self.name
            )
        for d in self.store_defs:
            if d.name not in self.store_names:
                raise InvalidTopologyError(
                    f"{self.name}: store {d.name!r} is defined but not connected",
                    processor=self.name,
                )

    def stores(self) -> tuple[str, ...]:
        return self.store_names

    @property
    def stateful(self) -> bool:
        # even without stores: a task keeps its stream time and punctuation schedule
        return True

    @property
    def kind(self) -> str:
        return "Processor"


@attrs.frozen(kw_only=True)
class ProcessValues(Process):
    """A :class:`Process` of a ``FixedKeyProcessor``: keys are kept, no repartition."""

    changes_key: ClassVar[bool] = False
