"""Checked by mypy --strict: grouping and aggregation keep their types, and misuse is a
type error (each ``# type: ignore[code]`` line must stay an error)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import assert_type

from kspark import (
    Grouped,
    KGroupedStream,
    KStream,
    KTable,
    Materialized,
    Named,
    SessionWindowedKStream,
    SessionWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindowedKStream,
    TimeWindows,
    Windowed,
)


@dataclasses.dataclass
class Payment:
    currency: str
    amount: float


b = StreamsBuilder()
payments = b.stream("payments", key_type=str, value_type=Payment)

grouped = payments.group_by_key()
assert_type(grouped, KGroupedStream[str, Payment])
counts = grouped.count(Named.as_("n"), Materialized.as_("counts"))
assert_type(counts, KTable[str, int])

by_currency = payments.group_by(lambda k, p: p.currency, Grouped.as_("by-currency"))
assert_type(by_currency, KGroupedStream[str, Payment])

biggest = grouped.reduce(lambda a, p: a if a.amount >= p.amount else p)
assert_type(biggest, KTable[str, Payment])

totals = by_currency.aggregate(lambda: 0.0, lambda k, p, total: total + p.amount)
assert_type(totals, KTable[str, float])

minute = TimeWindows.of_size_and_grace(timedelta(minutes=1), timedelta(seconds=5))
windowed = by_currency.windowed_by(minute.advance_by(timedelta(seconds=30)))
assert_type(windowed, TimeWindowedKStream[str, Payment])
per_minute = windowed.aggregate(lambda: 0.0, lambda k, p, total: total + p.amount)
assert_type(per_minute, KTable[Windowed[str], float])
final = per_minute.suppress(Suppressed.until_window_closes())
assert_type(final, KTable[Windowed[str], float])
plain = final.to_stream(lambda wk, total: wk.key)
assert_type(plain, KStream[str, float])
assert_type(windowed.count(), KTable[Windowed[str], int])

# misuse: each of these must stay a type error
grouped.reduce(lambda a, p: a.amount)  # type: ignore[arg-type, return-value]
by_currency.aggregate(lambda: 0.0, lambda p, total: total)  # type: ignore[arg-type, misc]
grouped.windowed_by(timedelta(minutes=1))  # type: ignore[call-overload]
counts.suppress("until-window-closes")  # type: ignore[arg-type]
payments.group_by_key(Named.as_("g"))  # type: ignore[arg-type]

sessions = grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(timedelta(minutes=5)))
assert_type(sessions, SessionWindowedKStream[str, Payment])
per_session = sessions.aggregate(
    lambda: 0.0, lambda k, p, total: total + p.amount, lambda k, a1, a2: a1 + a2, value_type=float
)
assert_type(per_session, KTable[Windowed[str], float])
sessions.aggregate(lambda: 0.0, lambda k, p, total: total + p.amount)  # type: ignore[call-arg]


def emit_strategy_keeps_the_windowed_stream_kind() -> None:
    """``emit_strategy`` returns the same kind of windowed stream it was called on."""
    from kspark import EmitStrategy, SlidingWindows
    from kspark.dsl.grouped import SlidingWindowedKStream, TimeWindowedKStream

    g = StreamsBuilder().stream("c", key_type=str, value_type=int).group_by_key()
    on_close = EmitStrategy.on_window_close()
    tumbling = g.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
    assert_type(tumbling.emit_strategy(on_close), TimeWindowedKStream[str, int])
    sliding = g.windowed_by(SlidingWindows.of_time_difference_without_a_grace(timedelta(seconds=1)))
    assert_type(sliding.emit_strategy(on_close), SlidingWindowedKStream[str, int])
