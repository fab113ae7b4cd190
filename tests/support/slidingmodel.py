"""A reference model of sliding-window aggregation (KIP-450), written from what the
windows hold rather than from how Kafka Streams finds them.

A key's windows are defined by its records: each record at ``t`` has the window ``[t - d,
t]`` (``[0, d]`` for a record before ``d``), and the window ``[t + 1, t + 1 + d]`` once
another record lies in it. A window holds the records in its range. Time closes windows:
a window whose end is before stream time minus grace takes no record, and a record that
no window could take (``t + d`` before stream time minus grace) is dropped. A window that
comes to exist holds the records in its range that came before it; a closed window never
comes to exist.

The model covers records that come in time for their own window ``[t - d, t]``.
Kafka Streams finds a record's neighbours through the windows that hold them, so a record
that comes after its own window closed (but in time for the window after it) is only
seen where a window holds it: the model marks such input ``ambiguous``, and the scenario
tests pin Kafka's behaviour for it.

The model emits per micro-batch, as the operator does: each window the batch changed,
with its content's aggregate and newest timestamp; with ``on_close``, each window once,
in the batch whose stream time closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A record: key, value, timestamp
Rec = tuple[str | None, Any, int]
#: A window's emitted row: (key, start, end) -> (aggregate, timestamp)
Emitted = dict[tuple[str, int, int], tuple[Any, int]]


class SlidingModel:
    """Sliding windows of ``size`` ms with ``grace``, folding each window's records (in
    time order, then arrival) with ``fold(values) -> aggregate``."""

    def __init__(
        self, size: int, grace: int, fold: Callable[[list[Any]], Any], on_close: bool = False
    ) -> None:
        self.size, self.grace, self.fold, self.on_close = size, grace, fold, on_close
        self.stream_time: int | None = None
        #: per key: records taken, (timestamp, arrival, value)
        self.records: dict[str, list[tuple[int, int, Any]]] = {}
        #: per key: start -> the records the window holds
        self.windows: dict[str, dict[int, list[tuple[int, int, Any]]]] = {}
        self.dropped: dict[str, int] = {}
        self.arrival = 0
        #: a record came after its own window had closed (see the module)
        self.ambiguous = False

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _row(self, content: list[tuple[int, int, Any]]) -> tuple[Any, int]:
        ordered = sorted(content)
        return self.fold([v for _, _, v in ordered]), max(t for t, _, _ in ordered)

    def batch(self, records: list[Rec]) -> Emitted:
        """One micro-batch: what it emits."""
        size = self.size
        prior = self.stream_time
        changed: set[tuple[str, int]] = set()
        for key, value, t in records:
            self.arrival += 1
            if self.stream_time is None or t > self.stream_time:
                self.stream_time = t
            if key is None or value is None:
                self._drop("null-key" if key is None else "null-value")
                continue
            close = self.stream_time - self.grace
            if t + size < close:
                self._drop("late-record")
                continue
            if t < close and t >= size:
                self.ambiguous = True
            rec = (t, self.arrival, value)
            recs = self.records.setdefault(key, [])
            wins = self.windows.setdefault(key, {})
            before = [r[0] for r in recs if r[0] < t]
            recs.append(rec)
            # the windows that hold t take it, unless closed
            for start, content in wins.items():
                if start <= t <= start + size:
                    if start + size >= close:
                        content.append(rec)
                        changed.add((key, start))
                    else:
                        self._drop("late-record")
            new: list[int] = []
            new.append(t - size if t >= size else 0)
            if before:  # the right window of the record before this one
                prev = max(before)
                if prev + 1 <= t <= prev + 1 + size:
                    new.append(prev + 1)
            if any(t < r[0] <= t + 1 + size for r in recs):
                new.append(t + 1)
            for start in dict.fromkeys(new):
                if start in wins:
                    continue
                if start + size < close:
                    self._drop("late-record")
                    continue
                wins[start] = [r for r in recs if start <= r[0] <= start + size]
                changed.add((key, start))
        out: Emitted = {}
        if self.on_close:
            if self.stream_time is None:
                return out
            close = self.stream_time - self.grace
            low = None if prior is None else prior - self.grace
            for key, wins in self.windows.items():
                for start, content in wins.items():
                    end = start + size
                    if end < close and (low is None or end >= low):
                        out[(key, start, end)] = self._row(content)
            return out
        for key, start in changed:
            out[(key, start, start + size)] = self._row(self.windows[key][start])
        return out

    def final(self) -> Emitted:
        """Every window's latest aggregate."""
        return {
            (k, s, s + self.size): self._row(c)
            for k, wins in self.windows.items()
            for s, c in wins.items()
        }
