"""A reference model of a time-limited suppression (Kafka Streams' ``KTableSuppressProcessor``
over its time-ordered buffer), one task, one update at a time: small enough to read."""

from __future__ import annotations

import dataclasses
from typing import Any

from kspark_server import stateenc

#: An update: key, value (None: a tombstone), timestamp
Update = tuple[Any, Any, int]


@dataclasses.dataclass(frozen=True)
class Emitted:
    """An emitted update and the index of the input update that emitted it."""

    key: Any
    value: Any
    ts: int
    at: int


class Full(Exception):
    """The buffer passed its bound in shut-down mode at update ``at``."""

    def __init__(self, at: int, out: list[Emitted]) -> None:
        super().__init__(at)
        self.at, self.out = at, out


def size_of(key: Any, value: Any) -> int:
    """A buffered update's bytes: the documented formula (no headers here)."""
    return 24 + len(stateenc.pack(key)) + len(stateenc.pack(value))


def suppress(
    updates: list[Update],
    limit: int,
    max_records: int | None = None,
    max_bytes: int | None = None,
    shut_down: bool = False,
) -> list[Emitted]:
    """What the suppression emits for ``updates``, in order; :class:`Full` in shut-down
    mode when the buffer passes a bound."""
    buf: dict[Any, list[Any]] = {}  # key -> [buffer time, value, timestamp, size]
    out: list[Emitted] = []
    stream_time: int | None = None

    def oldest() -> Any:
        return min(buf, key=lambda k: (buf[k][0], stateenc.pack(k)))

    def emit(k: Any, at: int) -> None:
        _, v, ts, _ = buf.pop(k)
        out.append(Emitted(k, v, ts, at))

    def over() -> bool:
        return (max_records is not None and len(buf) > max_records) or (
            max_bytes is not None and sum(e[3] for e in buf.values()) > max_bytes
        )

    for at, (k, v, ts) in enumerate(updates):
        stream_time = ts if stream_time is None else max(stream_time, ts)
        if k is None:
            continue
        first = buf[k][0] if k in buf else ts
        buf[k] = [first, v, ts, size_of(k, v)]
        while buf and buf[oldest()][0] <= stream_time - limit:
            emit(oldest(), at)
        if over() and shut_down:
            raise Full(at, out)
        while over():
            emit(oldest(), at)
    return out
