"""A reference model of Kafka Streams' cogrouped aggregation (KIP-150,
``CogroupedStreamAggregateBuilder``): several grouped streams, each with its own
aggregator, folded into one aggregate per key (or per time window), with a record cache
flushed once per micro-batch.

Within a task, the records of a micro-batch are processed as Kafka Streams' task
processes its partitions: each partition's records in offset order, and across
partitions the one whose head has the smallest timestamp first (ties: the record piped
first). Each micro-batch emits, per key (or window) it changed, its latest aggregate
once, in the order of each one's last update. A record with a null key is dropped, not
windowed a record with a null value too; a record too late for a window (stream time
past its end plus grace) is dropped from that window, counted once per window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: one piped record: input index, key, value, timestamp
Record = tuple[int, Any, Any, int]
#: an emitted row: key (windowed: ``(key, window start)``), aggregate, timestamp
Row = tuple[Any, Any, int]


def processing_order(records: Sequence[Record], task_of: Callable[[Any], int]) -> list[Record]:
    """``records`` (one micro-batch, in the order they were piped, each input one
    partition) in the order their tasks process them, task by task."""
    out: list[Record] = []
    tasks = sorted({task_of(r[1]) for r in records})
    for task in tasks:
        queues: dict[int, list[tuple[int, Record]]] = {}
        for seq, r in enumerate(records):
            if task_of(r[1]) == task:
                queues.setdefault(r[0], []).append((seq, r))
        while queues:
            q = min(queues, key=lambda q: (queues[q][0][1][3], queues[q][0][0]))
            out.append(queues[q].pop(0)[1])
            if not queues[q]:
                del queues[q]
    return out


class CogroupModel:
    """The state of one cogrouped aggregation across micro-batches.

    ``windows`` is None (per key) or ``(size, advance, grace)`` in ms; stream time is
    per task (``task_of`` gives a key's task).
    """

    def __init__(
        self,
        initializer: Callable[[], Any],
        aggregators: Sequence[Callable[[Any, Any, Any], Any]],
        task_of: Callable[[Any], int],
        windows: tuple[int, int, int] | None = None,
    ) -> None:
        self.initializer = initializer
        self.aggregators = list(aggregators)
        self.task_of = task_of
        self.windows = windows
        #: key (or (key, start)) -> (aggregate, timestamp)
        self.aggs: dict[Any, tuple[Any, int]] = {}
        self.stream_time: dict[int, int] = {}
        self.dropped: dict[str, int] = {}

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def batch(self, records: Sequence[Record]) -> list[Row]:
        """Process one micro-batch; the rows it emits, task by task."""
        rows: list[Row] = []
        ordered = processing_order(records, self.task_of)
        for task in sorted({self.task_of(r[1]) for r in ordered}):
            last: dict[Any, int] = {}
            mine = [r for r in ordered if self.task_of(r[1]) == task]
            for i, (idx, key, value, ts) in enumerate(mine):
                t = self.stream_time.get(task)
                self.stream_time[task] = ts if t is None else max(t, ts)
                now = self.stream_time[task]
                if key is None:
                    self._drop("null-key")
                    continue
                if self.windows is None:
                    if value is None:
                        self._drop("null-value")
                        continue
                    targets = [key]
                else:
                    size, advance, grace = self.windows
                    targets = []
                    # the windows that hold ts: starts are multiples of the advance, from 0
                    start = ts - ts % advance
                    starts = []
                    while start >= 0 and start > ts - size:
                        starts.append(start)
                        start -= advance
                    for start in sorted(starts):
                        if start + size <= now - grace:
                            self._drop("late-record")
                            continue
                        targets.append((key, start))
                for target in targets:
                    agg, newest = self.aggs.get(target, (self.initializer(), ts))
                    agg = self.aggregators[idx](key, value, agg)
                    self.aggs[target] = (agg, max(newest, ts))
                    last[target] = i
            for target, _ in sorted(last.items(), key=lambda kv: kv[1]):
                agg, newest = self.aggs[target]
                rows.append((target, agg, newest))
        return rows
