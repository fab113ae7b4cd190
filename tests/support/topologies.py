"""Topologies that several test files run: one definition, so their answers compare."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kspark import Materialized, StreamsBuilder


def as_of_join() -> Any:
    """One stateful operator with two inputs: stream ``in`` left-joined, as of each
    record's time, to the versioned table ``table`` (store ``rates``, 20 s of history);
    ``value * 100 + rate`` (-1 for no rate) to ``out``."""
    b = StreamsBuilder()
    rates = b.table(
        "table",
        key_type=str,
        value_type=int,
        materialized=Materialized.as_versioned("rates", timedelta(seconds=20)),
    )
    b.stream("in", key_type=str, value_type=int).left_join(
        rates, lambda v, r: v * 100 + (r if r is not None else -1), value_type=int
    ).to("out")
    return b.build()
