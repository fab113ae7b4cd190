"""Checked by mypy --strict: every factory of an options class is callable on the class and
chains on an instance, with the same signature. Each ``# type: ignore[code]`` marks a line
mypy must reject."""

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

from kspark import Deduplicated, Joined, Materialized, Named, Repartitioned
from kspark.dsl import Branched

assert_type(Joined.with_grace_period(timedelta(seconds=1)), Joined)
assert_type(Joined.as_("j").with_grace_period(timedelta(seconds=1)), Joined)
assert_type(Joined.with_name("j"), Joined)
assert_type(Repartitioned.with_num_partitions(4), Repartitioned)
assert_type(Repartitioned.as_("r").with_num_partitions(4), Repartitioned)
assert_type(Materialized.as_versioned("rates", timedelta(days=1)), Materialized)
assert_type(Materialized.as_("rates").as_versioned("fx", timedelta(days=1)), Materialized)
assert_type(Materialized.with_store_name("rates"), Materialized)
assert_type(Deduplicated.with_store_name("seen").as_("dedup"), Deduplicated)
assert_type(Branched.as_("b"), Branched)
assert_type(Named.as_("n"), Named)

Joined.with_grace_period(5)  # type: ignore[arg-type]
Joined.as_("j").with_grace_period(5)  # type: ignore[arg-type]
Repartitioned.with_num_partitions("4")  # type: ignore[arg-type]
Repartitioned.as_("r").with_num_partitions()  # type: ignore[call-arg]
Materialized.as_versioned("rates")  # type: ignore[call-arg]
Deduplicated.as_("d").with_store_name(store="x")  # type: ignore[call-arg]
