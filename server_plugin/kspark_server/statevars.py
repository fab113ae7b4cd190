"""The state variables that hold a task's state in Spark's state store: names and schemas.

A stateful operator's task keeps its state (:mod:`kspark_server.taskstate`) in three state
variables of ``transformWithStateInPandas``:

- ``<store>``: a map state, the base's chunks by number;
- ``<store>__log``: a list state, the changes since the base;
- ``<store>__version``: a value state, the state's version and sizes.

This module needs only pyspark's types: the processor the client ships declares the
variables with it, and Spark's planning runner, which calls its ``init``, imports nothing
more (:mod:`kspark_server.operators.shipped`).

Examples
--------
>>> log_name("rates"), version_name("rates")
('rates__log', 'rates__version')
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

__all__ = ["LOG_SUFFIX", "VERSION_SUFFIX", "StateVars", "declare", "log_name", "version_name"]

#: Suffix of the list-state variable that holds a store's log of changes.
LOG_SUFFIX = "__log"
#: Suffix of the value-state variable that holds a store's version.
VERSION_SUFFIX = "__version"

#: A base chunk, or a change: one frame of :mod:`kspark_server.stateenc`.
BLOB = StructType([StructField("blob", BinaryType(), True)])
#: The key of a base chunk in the ``<store>`` map state: its number.
CHUNK = StructType([StructField("chunk", IntegerType(), True)])
#: The version: the incarnation, the batches since it began, the sizes that decide when
#: a new base is written, and the number of base chunks.
VERSION = StructType(
    [
        StructField("incarnation", StringType(), True),
        StructField("batches", LongType(), True),
        StructField("base_bytes", LongType(), True),
        StructField("log_bytes", LongType(), True),
        StructField("log_len", IntegerType(), True),
        StructField("base_chunks", IntegerType(), True),
    ]
)


def log_name(store: str) -> str:
    """The list-state variable of ``store``'s log."""
    return store + LOG_SUFFIX


def version_name(store: str) -> str:
    """The value-state variable of ``store``'s version."""
    return store + VERSION_SUFFIX


class StateVars(NamedTuple):
    """A task's three state variables (Spark's map, list and value state handles)."""

    base: Any
    log: Any
    version: Any


def declare(handle: Any, store: str) -> StateVars:
    """Declare ``store``'s state variables on a ``StatefulProcessorHandle`` (in ``init``)."""
    return StateVars(
        handle.getMapState(store, CHUNK, BLOB),
        handle.getListState(log_name(store), BLOB),
        handle.getValueState(version_name(store), VERSION),
    )
