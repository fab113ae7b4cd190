"""Where a store view's entries come from: the checkpoint (read on the server, whichever
runner wrote it) or task states held in memory (a replica's, the in-process engine's);
and what every view over such a source shares."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from kspark.compiler.bundle import shipped
from kspark.compiler.lowering import flat_schema
from kspark_server.spec import TypeSpec

K = TypeVar("K")
V = TypeVar("V")


class _Source:
    """Where a read-only store's entries come from: ``entries(keys)`` gives the
    ``(table_time, per-key value)`` of each key found; ``count()`` and ``items()``."""

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        raise NotImplementedError


class _CheckpointSource(_Source):
    """Entries read from the checkpoint by a job on the server that returns only the
    entries asked for (:mod:`kspark_server.queries`): a lookup costs the client one
    entry, whatever the store's size.

    ``retry`` runs each job (a function of no argument that reads the committed state
    afresh and returns its whole answer) until it reads a version whose files are still
    there (:func:`kspark.runtime.stores.files.read_committed`); None: once, streamed.
    """

    def __init__(self, frame: Any, retry: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        # the store's committed base chunks (blob, first, log), of either runner
        self._frame = frame
        self._retry = retry

    def _run(self, job: Callable[[], Any]) -> Any:
        return job() if self._retry is None else self._retry(job)

    @staticmethod
    def _decode(rows: Iterable[Any]) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        from kspark_server import stateenc

        for r in rows:
            sc = stateenc.unpack(r["scalars"])
            yield stateenc.unpack(r["key"]), (sc.get("table_time"), stateenc.unpack(r["entry"])[0])

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        from kspark_server import queries, stateenc

        wanted = [stateenc.pack(k) for k in keys]
        frame = self._frame.mapInPandas(
            shipped(queries.lookup(wanted)), flat_schema(queries.ENTRY_SCHEMA)
        )
        return dict(self._decode(self._run(frame.collect)))

    def count(self) -> int:
        from pyspark.sql import functions as F

        from kspark_server import queries

        frame = self._frame.mapInPandas(
            shipped(queries.count()), flat_schema(queries.COUNT_SCHEMA)
        ).agg(F.sum("entries").alias("n"))
        row = self._run(frame.collect)[0]
        return int(row["n"] or 0)

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        from kspark_server import queries

        frame = self._frame.mapInPandas(shipped(queries.scan()), flat_schema(queries.ENTRY_SCHEMA))
        if self._retry is None:
            yield from self._decode(frame.toLocalIterator())
        else:
            # whole, so that a read retried at a newer version yields no entry twice
            yield from self._decode(self._retry(frame.collect))


class _MemorySource(_Source):
    """Entries of task states held in memory (a replica's)."""

    def __init__(self, tasks: dict[int, Any], versioned: bool) -> None:
        self._tasks, self._versioned = tasks, versioned

    def _table(self, st: Any) -> tuple[Any, dict[Any, Any]]:
        if self._versioned:
            return st["table"]["time"], st["table"]["data"]
        return None, st["table"]

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        out = {}
        for task in self._tasks.values():
            time, data = self._table(task)
            out.update({k: (time, data[k]) for k in keys if k in data})
        return out

    def count(self) -> int:
        return sum(len(self._table(task)[1]) for task in self._tasks.values())

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        for task in self._tasks.values():
            time, data = self._table(task)
            for k, v in data.items():
                yield k, (time, v)


class _StoreView(Generic[K, V]):
    """What the read-only views of a store share: entries from a :class:`_Source`, keys
    encoded as the operator stores them, values decoded to their type (from JSON text
    when ``packed``)."""

    def __init__(
        self, name: str, source: _Source, key: TypeSpec, value: TypeSpec, packed: bool
    ) -> None:
        from kspark_server import codec

        self.name = name
        self._source = source
        self._kenc = codec.encoder(key, "key")
        dec = codec.decoder(value)
        self._vdec: Any = (lambda v: dec(json.loads(v))) if packed else dec
        self._hashable = codec.hashable

    def approximate_num_entries(self) -> int:
        """Keys with a value (a versioned store's: with a version; a windowed
        aggregation's: (key, window) pairs)."""
        return self._source.count()
