"""The DSL's option classes: factories on the class and on an instance."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kspark import Deduplicated, Joined, Materialized, Repartitioned, StreamsBuilder, Topic
from kspark.dsl import Branched
from kspark.errors import InvalidArgumentError


def test_repartitioned_keeps_its_name_when_the_partitions_are_chained() -> None:
    assert Repartitioned.as_("r").with_num_partitions(4) == Repartitioned(
        name="r", num_partitions=4
    )
    assert Repartitioned.with_num_partitions(4).as_("r") == Repartitioned(
        name="r", num_partitions=4
    )


def test_a_chained_repartition_name_reaches_the_plan() -> None:
    s = StreamsBuilder().stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    r = s.repartition(Repartitioned.as_("by-key").with_num_partitions(4))
    assert (r.name, r.node.num_partitions) == ("by-key", 4)  # type: ignore[attr-defined]


def test_joined_factories_work_on_the_class_and_keep_what_an_instance_had() -> None:
    d = timedelta(seconds=3)
    assert Joined.with_grace_period(d) == Joined(grace_period=d)
    assert Joined.as_("j").with_grace_period(d) == Joined(name="j", grace_period=d)
    assert Joined.with_grace_period(d).as_("j") == Joined(name="j", grace_period=d)
    assert Joined.with_grace_period(d).with_name("j") == Joined(name="j", grace_period=d)


def test_materialized_factories_work_on_the_class_and_on_an_instance() -> None:
    day = timedelta(days=1)
    versioned = Materialized.as_versioned("rates", day)
    assert versioned == Materialized(store_name="rates", versioned=True, history_retention=day)
    assert versioned.as_("fx") == Materialized(
        store_name="fx", versioned=True, history_retention=day
    )
    assert Materialized.with_store_name("x") == Materialized(store_name="x")
    assert Materialized.as_("x").as_versioned("y", day) == Materialized.as_versioned("y", day)


def test_deduplicated_and_branched_factories() -> None:
    assert Deduplicated.with_store_name("seen").as_("d") == Deduplicated(
        name="d", store_name="seen"
    )
    assert Deduplicated.with_name("d") == Deduplicated(name="d")
    assert Branched.as_("b") == Branched(name="b")


def test_an_instance_is_never_changed_by_a_factory() -> None:
    j = Joined.as_("j")
    j.with_grace_period(timedelta(seconds=1))
    assert j == Joined(name="j")


def test_factories_still_validate() -> None:
    with pytest.raises(InvalidArgumentError):
        Repartitioned.as_("r").with_num_partitions(0)
    with pytest.raises(InvalidArgumentError):
        Joined.as_("j").with_grace_period(timedelta(seconds=-1))


def test_materialized_has_no_segment_interval() -> None:
    with pytest.raises(TypeError):
        Materialized.as_versioned("rates", timedelta(days=1), timedelta(hours=1))  # type: ignore[call-arg]
