"""Windows of windowed aggregations: ``Window``, ``Windowed`` and which windows a time is in.

They live in this package, not in ``kspark``, because the operator builds ``Windowed``
keys in Spark's Python workers, which must not import ``kspark``; ``kspark`` re-exports
both classes.

Windows follow Kafka Streams' ``TimeWindows``: a window covers ``[start, end)`` in epoch
milliseconds (``end`` exclusive), starts are multiples of the advance, and no window
starts before 0.

Examples
--------
>>> windows_for(7_500, size=5_000, advance=5_000)
[5000]
>>> windows_for(7_500, size=10_000, advance=5_000)
[0, 5000]
>>> Windowed(key="EUR", window=Window(start=0, end=60_000))
Windowed(key='EUR', window=Window(start=0, end=60000))
"""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

__all__ = ["Window", "Windowed", "windows_for"]

K = TypeVar("K")


@dataclasses.dataclass(frozen=True)
class Window:
    """A time window: ``start`` inclusive, ``end`` exclusive, both epoch milliseconds.

    Examples
    --------
    >>> Window(start=0, end=60_000).end
    60000
    """

    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class Windowed(Generic[K]):
    """The key of a windowed aggregation's table: the record key and its window.

    Examples
    --------
    >>> w = Windowed(key="EUR", window=Window(start=60_000, end=120_000))
    >>> w.key, w.window.start, w.window.end
    ('EUR', 60000, 120000)
    """

    key: K
    window: Window


def windows_for(ts: int, size: int, advance: int) -> list[int]:
    """The starts of the windows of ``size`` ms every ``advance`` ms that contain ``ts``,
    oldest first (Kafka Streams' ``TimeWindows.windowsFor``)."""
    start = (max(0, ts - size + advance) // advance) * advance
    out = []
    while start <= ts:
        out.append(start)
        start += advance
    return out
