"""Plan-only tests: a processor that reaches no sink stays in the topology (its ``ends``)
and compiles to a stage of the app's query, as Kafka Streams runs such branches."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from kspark import JoinWindows, Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import InvalidArgumentError
from kspark.plan.types import DYNAMIC
from kspark.runtime.restore import store_order

CFG = StreamsConfig(application_id="ends-test", num_partitions=2)


def _topic(name: str) -> Topic:
    return Topic.jsonl(name, f"/tmp/ends/{name}")


def test_a_branch_that_ends_in_peek_is_kept_and_compiled() -> None:
    b = StreamsBuilder()
    src = b.stream(_topic("in"), key_type=str, value_type=int)
    peek = src.filter(lambda k, v: v < 0).peek(lambda k, v: None)
    src.to(_topic("out"))
    topology = b.build()
    assert [e.name for e in topology.ends] == [peek.name]
    assert f"Processor: {peek.name}" in topology.describe()
    assert peek.name in [node.name for node in topology.nodes()]
    out = compile_topology(topology, CFG)
    (end,) = out.ends
    assert isinstance(end, st.Chain)
    assert end in out.stages() and out.roots()[-1] is end


def test_only_the_last_processor_of_a_dangling_branch_is_an_end() -> None:
    """Each processor with no child is an end once; the processors before it are in the
    topology through it."""
    b = StreamsBuilder()
    src = b.stream(_topic("in"), key_type=str, value_type=int)
    branches = src.split().branch(lambda k, v: v > 0).default_branch()
    mapped = src.map_values(lambda v: v + 1, value_type=int)
    mapped.filter(lambda k, v: v > 1)
    mapped.to(_topic("out"))
    ends = [e.name for e in b.build().ends]
    assert ends == [*(s.name for s in branches.values()), "KSTREAM-FILTER-0000000005"]
    assert mapped.name not in ends


def test_a_table_that_nothing_reads_keeps_its_store() -> None:
    b = StreamsBuilder()
    src = b.stream(_topic("in"), key_type=str, value_type=int)
    src.group_by_key().count(materialized=Materialized.as_("counts"))
    src.to(_topic("out"))
    topology = b.build()
    assert "counts" in topology.stores()
    out = compile_topology(topology, CFG)
    assert store_order(out) == ["counts"]


def test_a_topology_of_sinks_only_has_no_ends() -> None:
    b = StreamsBuilder()
    b.stream(_topic("in"), key_type=str, value_type=int).to(_topic("out"))
    topology = b.build()
    assert topology.ends == ()
    assert compile_topology(topology, CFG).ends == ()


@dataclasses.dataclass
class Attributed:
    click: str
    view: str | None


def _streams() -> tuple[StreamsBuilder, object, object]:
    b = StreamsBuilder()
    clicks = b.stream(_topic("clicks"), key_type=str, value_type=str)
    views = b.stream(_topic("views"), key_type=str, value_type=str)
    return b, clicks, views


WINDOWS = JoinWindows.of_time_difference_and_grace(timedelta(minutes=5), timedelta(seconds=30))


@pytest.mark.parametrize("method", ["join", "left_join", "outer_join"])
def test_stream_joins_take_the_windows_by_name(method: str) -> None:
    _, clicks, views = _streams()
    joined = getattr(clicks, method)(views, lambda c, v: f"{c}/{v}", windows=WINDOWS)
    assert (joined.node.before_ms, joined.node.mode) == (
        300_000,
        method.removesuffix("join").strip("_") or "inner",
    )


def test_the_windows_are_given_once() -> None:
    _, clicks, views = _streams()
    with pytest.raises(InvalidArgumentError, match="once"):
        clicks.join(views, lambda c, v: c, WINDOWS, windows=WINDOWS)  # type: ignore[call-overload]


def test_a_class_joiner_gives_the_joined_value_type() -> None:
    _, clicks, views = _streams()
    typed = clicks.left_join(views, Attributed, WINDOWS)
    assert typed.node.value_type.display() == "Attributed"

    def annotated(c: str, v: str | None) -> Attributed:
        return Attributed(c, v)

    assert clicks.join(views, annotated, windows=WINDOWS).node.value_type.display() == "Attributed"
    assert clicks.join(views, lambda c, v: Attributed(c, v), WINDOWS).node.value_type is DYNAMIC
