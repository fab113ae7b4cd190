"""Checked by mypy --strict: stream-stream joins are typed by both streams' value types, and
the second argument's kind (a table or a stream) chooses the overload. Each
``# type: ignore[code]`` marks a line mypy must reject."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import assert_type

from kspark import JoinWindows, KStream, Named, StreamJoined, StreamsBuilder, Topic


@dataclasses.dataclass
class Click:
    page: str


@dataclasses.dataclass
class View:
    seconds: float


b = StreamsBuilder()
clicks = b.stream(Topic.jsonl("clicks", "/c"), key_type=str, value_type=Click)
views = b.stream(Topic.jsonl("views", "/v"), key_type=str, value_type=View)
table = b.table(Topic.jsonl("pages", "/p"), key_type=str, value_type=str)
windows = JoinWindows.of_time_difference_and_grace(timedelta(minutes=5), timedelta(seconds=30))

inner = clicks.join(views, lambda c, v: f"{c.page}:{v.seconds}", windows)
assert_type(inner, KStream[str, str])

with_key = clicks.join(views, lambda k, c, v: (k, c.page, v.seconds), windows)
assert_type(with_key, KStream[str, tuple[str, str, float]])

left = clicks.left_join(views, lambda c, v: v.seconds if v else 0.0, windows, StreamJoined.as_("s"))
assert_type(left, KStream[str, float])

outer = clicks.outer_join(
    views, lambda c, v: (c.page if c else "", v.seconds if v else 0.0), windows, Named.as_("j")
)
assert_type(outer, KStream[str, tuple[str, float]])

# the stream-table join keeps working beside it
enriched = clicks.join(table, lambda c, name: f"{c.page}:{name}")
assert_type(enriched, KStream[str, str])

asymmetric = windows.before(timedelta(0)).after(timedelta(minutes=1))
assert_type(asymmetric, JoinWindows)

# misuse: each of these must stay a type error
clicks.join(views, lambda c, v: v.page, windows)  # type: ignore[attr-defined]
clicks.left_join(views, lambda c, v: v.seconds, windows)  # type: ignore[union-attr]
clicks.outer_join(views, lambda c, v: c.page, windows)  # type: ignore[union-attr]
clicks.outer_join(table, lambda c, v: c, windows)  # type: ignore[call-overload]
clicks.join(views, lambda c, v: c, timedelta(minutes=5))  # type: ignore[call-overload]
JoinWindows.of_time_difference_with_no_grace(300)  # type: ignore[arg-type]
