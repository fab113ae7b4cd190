"""Deduplication's batch decision (``operators.dedup._decide``) against KIP-655's
record-by-record loop: both the array rounds and the per-record path (ids with many
records in one batch, timestamps beyond int64's safe range)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark_server.operators import dedup


def loop(
    ids: list[Any], ts: list[int], start: int | None, seen: dict[Any, int], interval: int
) -> tuple[list[int], dict[Any, int], dict[Any, int]]:
    """The decision one record at a time (ids None: forwarded, no entry)."""
    seen = dict(seen)
    taken, stored = [], {}
    stream_time = start
    for i, (ident, t) in enumerate(zip(ids, ts, strict=True)):
        stream_time = t if stream_time is None or t > stream_time else stream_time
        if ident is None:
            taken.append(i)
            continue
        low = stream_time - interval
        prev = seen.get(ident)
        if prev is not None and prev >= low and -interval <= prev - t <= interval:
            continue
        taken.append(i)
        if t >= low:
            seen[ident] = t
            stored[ident] = i
    return taken, {k: seen[k] for k in stored}, stored


def decide(
    ids: list[Any], ts: list[int], start: int | None, seen: dict[Any, int], interval: int
) -> tuple[list[int], dict[Any, int], dict[Any, int]]:
    index: dict[Any, int] = {}
    codes = np.array([-1 if i is None else index.setdefault(i, len(index)) for i in ids])
    times = np.maximum.accumulate(np.array(ts, dtype="int64"))
    if start is not None:
        times = np.maximum(times, start)
    active = codes >= 0
    taken = ~active
    if active.any():
        prev, last = dedup._decide(
            np.array(ts, dtype="int64"), times, codes, active, taken, seen, list(index), interval
        )
    else:
        prev, last = {}, {}
    return np.flatnonzero(taken).tolist(), prev, last


@pytest.mark.parametrize("rounds", [1, 3, 64])
@settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(
    data=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d", None]), st.integers(0, 60)),
        min_size=1,
        max_size=40,
    ),
    interval=st.integers(0, 15),
    start=st.none() | st.integers(0, 60),
    seen=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 60)),
)
def test_rounds_decide_as_the_loop(
    monkeypatch: pytest.MonkeyPatch,
    rounds: int,
    data: list[tuple[str | None, int]],
    interval: int,
    start: int | None,
    seen: dict[str, int],
) -> None:
    monkeypatch.setattr(dedup, "_ROUNDS", rounds)
    ids, ts = [i for i, _ in data], [t for _, t in data]
    assert decide(ids, ts, start, seen, interval) == loop(ids, ts, start, seen, interval)


def test_timestamps_beyond_int64_safe_range_decide_as_the_loop() -> None:
    big = 2**62
    ids, ts = ["a", "a", "b", "a"], [big, big + 5, -big, big + 20]
    for interval in (10, 2**62):
        assert decide(ids, ts, None, {"b": -big}, interval) == loop(
            ids, ts, None, {"b": -big}, interval
        )
