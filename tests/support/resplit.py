"""The re-split of task states as pure functions over frames of base chunks: what the
properties of :func:`kspark_server.rescale.split` and :func:`kspark_server.rescale.merge`
are checked through (``rescale`` of many old tasks' states into ``m`` new ones)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd

from kspark_server import placement, queries, taskstate
from kspark_server.rescale import checksum, entries, merge, split
from kspark_server.spec import BASE_CHUNK_BYTES

#: ``ks_task`` of an old task's share after its first (counted in entries, not in tasks).
OLD_SHARE = -2


def split_states(
    kind: str, versioned: bool, m: int, chunk_bytes: int = BASE_CHUNK_BYTES
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The function over frames of base chunks (``blob``, ``first``, ``log``: see
    :mod:`kspark_server.queries`), one old task's chunk at a time; each part
    in chunks of about ``chunk_bytes``."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for blob, first, log in queries.chunks(frames):
            st = taskstate.from_pairs(kind, versioned, *taskstate.share(blob, first, log))
            rows: list[tuple[int, bytes | None, int, int, int, int]] = [
                (
                    -1 if first else OLD_SHARE,
                    None,
                    0,
                    entries(kind, versioned, st),
                    0,
                    checksum(kind, versioned, st),
                )
            ]
            for task, p in split(kind, versioned, st, m).items():
                # a part in chunks (with the task's entries and checksum on its first)
                for i, chunk in enumerate(taskstate.base_chunks(kind, versioned, p, chunk_bytes)):
                    rows.append(
                        (
                            task,
                            chunk,
                            entries(kind, versioned, p) if i == 0 else 0,
                            0,
                            checksum(kind, versioned, p) if i == 0 else 0,
                            0,
                        )
                    )
            # one frame per chunk read: no more than a chunk's share of a task at a time
            yield pd.DataFrame(
                rows,
                columns=["ks_task", "part", "entries", "old_entries", "checksum", "old_checksum"],
            )

    return run


def merge_states(
    kind: str, versioned: bool, m: int, chunk_bytes: int = BASE_CHUNK_BYTES
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The ``applyInPandas`` function of one new task's parts (of ``m`` new tasks): its
    base in chunks of about ``chunk_bytes``."""

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        task = int(frame["ks_task"].iat[0])
        parts = [taskstate.materialize(kind, versioned, [b], []) for b in frame["part"].tolist()]
        st = merge(kind, versioned, parts)
        blobs = taskstate.base_chunks(kind, versioned, st, chunk_bytes)
        counted = [taskstate.materialize(kind, versioned, [b], []) for b in blobs]
        return pd.DataFrame(
            {
                "ks_task": [placement.task_keys(m)[task]] * len(blobs),
                "chunk": list(range(len(blobs))),
                "blob": blobs,
                "entries": [entries(kind, versioned, c) for c in counted],
                "checksum": [checksum(kind, versioned, c) for c in counted],
            }
        )

    return run


def check_states(
    kind: str, versioned: bool
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function that reads written task states back (``ks_task``,
    ``blob``: one row per chunk) and gives each chunk's entries and checksum, to verify the
    rewrite (a task's are the sums over its chunks)."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            rows = []
            for task, blob in zip(frame["ks_task"].tolist(), frame["blob"].tolist(), strict=True):
                st = taskstate.materialize(kind, versioned, [blob], [])
                rows.append(
                    (int(task), entries(kind, versioned, st), checksum(kind, versioned, st))
                )
            yield pd.DataFrame(rows, columns=["ks_task", "entries", "checksum"])

    return run
