"""The lookup key of a global-table join's stream records (``KStream.join(global_table,
key_selector, joiner)``).

Each stream record gets, in the column ``ks_gkey``, the table key that
``key_selector(key, value)`` gives, encoded as the table's keys are. The join's operator
groups records by the task of that column, the table's updates by the task of their own
key, so each stream record meets the table's value for its lookup key; the record's own
key stays in ``key`` and is the output's key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from kspark_server import codec, handling
from kspark_server.spec import JoinKeySpec, check_spec

__all__ = ["make_join_key_stage"]


def make_join_key_stage(
    spec: JoinKeySpec,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that adds ``ks_gkey`` to each record.

    The selector is not called for a record with a null value: the join drops such a
    record whatever its lookup key. A selector that raises, or gives a key that is not of
    the table's key type, is a failure of the join's processor (the processing exception
    handler)."""
    check_spec(spec)
    guard = handling.Guard(spec.handling, handling.json_columns(spec))
    kdec = codec.decoder(spec.input.key)
    vdec = codec.decoder(spec.input.value)
    kenc = codec.encoder(spec.table_key, "the key selector's table key")
    fn, name = spec.key_selector, spec.processor

    def select(k: object, v: object) -> object:
        return kenc(fn(k, v))

    def each(row: dict[str, Any]) -> bool:
        row["ks_gkey"] = None
        if row["ks_side"] is None and row["value"] is not None:
            args = guard.decode(name, kdec, vdec, row)
            if args is None:
                return False
            ok, found = guard.call(name, select, args, row)
            if not ok:
                return False
            row["ks_gkey"] = found
        return True

    return handling.record_stage(guard, spec.output_schema, each)
