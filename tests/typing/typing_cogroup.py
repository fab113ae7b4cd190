"""Checked by mypy --strict: a cogrouped aggregation keeps its types, each aggregator is
checked against its own grouped stream's value type and the shared aggregate type, and
misuse is a type error (each ``# type: ignore[code]`` line must stay an error)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import assert_type

from kspark import (
    CogroupedKStream,
    KTable,
    Materialized,
    Named,
    SessionWindowedCogroupedKStream,
    SessionWindows,
    StreamsBuilder,
    TimeWindowedCogroupedKStream,
    TimeWindows,
    Windowed,
)


@dataclasses.dataclass
class View:
    page: str
    seconds: int


@dataclasses.dataclass
class Click:
    page: str


@dataclasses.dataclass
class Stats:
    views: int = 0
    seconds: int = 0
    clicks: int = 0


def add_view(user: str, view: View, stats: Stats) -> Stats:
    return Stats(stats.views + 1, stats.seconds + view.seconds, stats.clicks)


def add_click(user: str, click: Click, stats: Stats) -> Stats:
    return Stats(stats.views, stats.seconds, stats.clicks + 1)


def merge(user: str, a: Stats, b: Stats) -> Stats:
    return Stats(a.views + b.views, a.seconds + b.seconds, a.clicks + b.clicks)


b = StreamsBuilder()
views = b.stream("views", key_type=str, value_type=View).group_by_key()
clicks = b.stream("clicks", key_type=str, value_type=Click).group_by_key()

cogrouped = views.cogroup(add_view).cogroup(clicks, add_click)
assert_type(cogrouped, CogroupedKStream[str, Stats])
stats = cogrouped.aggregate(Stats, Named.as_("stats"), Materialized.as_("stats"))
assert_type(stats, KTable[str, Stats])

minute = TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
per_minute = cogrouped.windowed_by(minute)
assert_type(per_minute, TimeWindowedCogroupedKStream[str, Stats])
assert_type(per_minute.aggregate(Stats), KTable[Windowed[str], Stats])

sessions = cogrouped.windowed_by(
    SessionWindows.of_inactivity_gap_with_no_grace(timedelta(minutes=5))
)
assert_type(sessions, SessionWindowedCogroupedKStream[str, Stats])
assert_type(sessions.aggregate(Stats, merge), KTable[Windowed[str], Stats])

# a click's aggregator for the views' grouped stream: the value types differ
views.cogroup(add_click)  # type: ignore[arg-type]
# the views' aggregator for the clicks
cogrouped.cogroup(clicks, add_view)  # type: ignore[arg-type]
# another key type
by_page = b.stream("pages", key_type=int, value_type=Click).group_by_key()
cogrouped.cogroup(by_page, add_click)  # type: ignore[arg-type]
# an initializer of another aggregate type
cogrouped.aggregate(lambda: 0)  # type: ignore[arg-type,return-value]
# a session merger of another aggregate type
sessions.aggregate(Stats, lambda user, a, b: 0)  # type: ignore[arg-type,return-value]
