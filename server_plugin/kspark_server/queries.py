"""Interactive queries, run on the server: read a store's tasks and return only the answer.

The client (``kspark.runtime.stores``) reads each task's base and log with Spark's state
reader and runs these functions over them with ``mapInPandas``, so that a lookup of one
key sends the client one entry, whatever the size of the store. What they return is
MessagePack (:mod:`kspark_server.stateenc`), never pickle.

Input rows, one per base chunk (:mod:`kspark_server.taskstate`): ``blob`` (the chunk),
``first`` (whether it is the task's chunk 0) and ``log`` (the task's changes, oldest
first; may be null). Each row
stands for its share of the task (:func:`kspark_server.taskstate.share`), so no function
here holds more than one chunk and the log at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from kspark_server import stateenc, taskstate

#: Output of :func:`lookup` and :func:`scan`: the task's scalars and one (key, entry).
ENTRY_SCHEMA = "scalars binary, key binary, entry binary"
#: Output of :func:`count`.
COUNT_SCHEMA = "entries long"


def chunks(frames: Iterator[pd.DataFrame]) -> Iterator[tuple[bytes, bool, list[bytes]]]:
    """Each row's chunk, whether it is its task's chunk 0, and its task's log."""
    for frame in frames:
        blobs, firsts, logs = (frame[c].tolist() for c in ("blob", "first", "log"))
        for blob, first, log in zip(blobs, firsts, logs, strict=True):
            if blob is not None:
                yield blob, bool(first), [] if log is None else list(log)


def shares(frames: Iterator[pd.DataFrame]) -> Iterator[tuple[dict[str, Any], dict[bytes, bytes]]]:
    """The (scalars, encoded pairs) of each row's share of its task."""
    for blob, first, log in chunks(frames):
        yield taskstate.share(blob, first, log)


def lookup(keys: list[bytes]) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The entries of the encoded ``keys``, with their task's scalars."""
    wanted = set(keys)

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        rows: list[tuple[bytes, bytes, bytes]] = []
        for s, pairs in shares(frames):
            packed = stateenc.pack(s)
            rows.extend((packed, k, pairs[k]) for k in wanted if k in pairs)
        yield pd.DataFrame(rows, columns=["scalars", "key", "entry"])

    return run


def scan() -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """Every entry, with its task's scalars."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for s, pairs in shares(frames):
            packed = stateenc.pack(s)
            yield pd.DataFrame(
                [(packed, k, e) for k, e in pairs.items()], columns=["scalars", "key", "entry"]
            )

    return run


def count() -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The number of entries of each task."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"entries": [len(pairs) for _, pairs in shares(frames)]}, dtype="int64")

    return run
