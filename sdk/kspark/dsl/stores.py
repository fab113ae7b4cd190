"""State stores for the Processor API (public as :mod:`kspark.state`): ``Stores`` makes them, ``StreamsBuilder.add_state_store``
adds them, ``KStream.process(supplier, *store_names)`` connects them.

A store is task-local: each task of the processor has its own, kept as kspark's operators
keep theirs (an executor-local store, a durable log of changes in the checkpoint, restored
after a restart) and readable through ``StreamsApp.store(name)``.

Examples
--------
>>> from datetime import timedelta
>>> from kspark.state import Stores
>>> b = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"),
...                                    key_type=str, value_type=int)
>>> b.name, b.build().kind
('counts', 'key_value')
>>> Stores.window_store_builder(
...     Stores.persistent_window_store("w", timedelta(hours=1), timedelta(minutes=5), False),
...     key_type=str, value_type=int).build().window_size_ms
300000
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Generic, TypeVar

import attrs

from kspark.dsl._infer import resolve
from kspark.dsl.options import to_ms
from kspark.errors import InvalidArgumentError
from kspark.plan.processing import StoreDef, StoreKind
from kspark_server.papi import (
    KeyValueIterator,
    KeyValueStore,
    StateStoreError,
    VersionedKeyValueStore,
    VersionedRecord,
    WindowStore,
    WindowStoreIterator,
)

__all__ = [
    "KeyValueBytesStoreSupplier",
    "KeyValueIterator",
    "KeyValueStore",
    "StateStoreError",
    "StoreBuilder",
    "Stores",
    "VersionedBytesStoreSupplier",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowBytesStoreSupplier",
    "WindowStore",
    "WindowStoreIterator",
]

S = TypeVar("S")


@attrs.frozen
class _Supplier:
    name: str
    kind: StoreKind
    in_memory: bool = False
    history_retention_ms: int = 0
    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False


@attrs.frozen
class KeyValueBytesStoreSupplier(_Supplier):
    """A key-value store's name and kind (``Stores.persistent_key_value_store``)."""


@attrs.frozen
class VersionedBytesStoreSupplier(_Supplier):
    """A versioned store's name and history retention."""


@attrs.frozen
class WindowBytesStoreSupplier(_Supplier):
    """A window store's name, retention and window size."""


@attrs.frozen
class StoreBuilder(Generic[S]):
    """A store to add to a builder (``StreamsBuilder.add_state_store``); ``S`` is the
    store interface the processor gets from ``context.get_state_store(name)``."""

    supplier: _Supplier
    key_type: Any = None
    value_type: Any = None
    logging: bool = True

    @property
    def name(self) -> str:
        """The store's name."""
        return self.supplier.name

    def with_logging_disabled(self) -> StoreBuilder[S]:
        """The builder with its ``logging`` flag off; it changes nothing at run time.

        Kafka Streams' store without a changelog starts empty once its local copy is lost.
        kspark writes every processor store's changes to the task's durable state all the
        same: the store is restored after a restart or the loss of an executor, moved by
        a rescale and answered by ``app.store``, and costs what a logged store costs. The
        flag is kept in the plan (``StoreDef.logging``) for topologies ported from Kafka
        Streams.

        Examples
        --------
        >>> from kspark.state import Stores
        >>> b = Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"))
        >>> b.with_logging_disabled().logging, b.with_logging_disabled().build().logging
        (False, False)
        """
        return attrs.evolve(self, logging=False)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> StoreBuilder[S]:
        """The builder with its ``logging`` flag on (the default); ``config`` (Kafka
        Streams' changelog topic settings) is ignored, since the durable state is in the
        checkpoint, not in a topic."""
        return attrs.evolve(self, logging=True)

    def with_caching_enabled(self) -> StoreBuilder[S]:
        """Accepted for Kafka Streams compatibility: kspark writes a task's changes once
        per micro-batch already."""
        return self

    def build(self) -> StoreDef:
        """The store's plan definition."""
        s = self.supplier
        where = f"store {s.name!r}"
        return StoreDef(
            name=s.name,
            kind=s.kind,
            key_type=resolve(self.key_type, None, where, "key_type"),
            value_type=resolve(self.value_type, None, where, "value_type"),
            in_memory=s.in_memory,
            logging=self.logging,
            history_retention_ms=s.history_retention_ms,
            retention_ms=s.retention_ms,
            window_size_ms=s.window_size_ms,
            retain_duplicates=s.retain_duplicates,
        )


class Stores:
    """Factories of stores, as Kafka Streams' ``Stores``.

    Examples
    --------
    >>> from kspark.state import Stores
    >>> Stores.in_memory_key_value_store("cache").in_memory
    True
    """

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A key-value store named ``name``."""
        return KeyValueBytesStoreSupplier(name, "key_value")

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A key-value store named ``name``; kspark keeps it as a persistent one (one
        store engine: read through the executor-local store, written to the durable state,
        restored after a restart)."""
        return KeyValueBytesStoreSupplier(name, "key_value", in_memory=True)

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention: timedelta
    ) -> VersionedBytesStoreSupplier:
        """A versioned store keeping each key's versions for ``history_retention``."""
        return VersionedBytesStoreSupplier(
            name, "versioned", history_retention_ms=to_ms(history_retention, "history_retention")
        )

    @staticmethod
    def persistent_window_store(
        name: str, retention: timedelta, window_size: timedelta, retain_duplicates: bool
    ) -> WindowBytesStoreSupplier:
        """A window store keeping windows of ``window_size`` for ``retention``;
        ``retain_duplicates`` keeps every put of a key and window, not the last."""
        return WindowBytesStoreSupplier(
            name,
            "window",
            retention_ms=to_ms(retention, "retention"),
            window_size_ms=to_ms(window_size, "window_size"),
            retain_duplicates=bool(retain_duplicates),
        )

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, *, key_type: Any = None, value_type: Any = None
    ) -> StoreBuilder[KeyValueStore[Any, Any]]:
        """A builder of a key-value store with keys and values of these types (dynamic,
        any JSON-compatible value, when not given)."""
        _check(supplier, "key_value", "key_value_store_builder")
        return StoreBuilder(supplier, key_type, value_type)

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: VersionedBytesStoreSupplier, *, key_type: Any = None, value_type: Any = None
    ) -> StoreBuilder[VersionedKeyValueStore[Any, Any]]:
        """A builder of a versioned store."""
        _check(supplier, "versioned", "versioned_key_value_store_builder")
        return StoreBuilder(supplier, key_type, value_type)

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier, *, key_type: Any = None, value_type: Any = None
    ) -> StoreBuilder[WindowStore[Any, Any]]:
        """A builder of a window store."""
        _check(supplier, "window", "window_store_builder")
        return StoreBuilder(supplier, key_type, value_type)


def _check(supplier: Any, kind: str, method: str) -> None:
    if not isinstance(supplier, _Supplier) or supplier.kind != kind:
        raise InvalidArgumentError(
            f"Stores.{method} takes a supplier of a {kind} store, got {supplier!r}",
            parameter="supplier",
        )
