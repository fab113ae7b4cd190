"""Plan-only tests of the stream-stream join: the DSL's overloads and checks, names,
``describe()`` and the compiled operator spec. No Spark server."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kspark import (
    Joined,
    JoinWindows,
    KStream,
    Named,
    StreamJoined,
    StreamsBuilder,
    StreamsConfig,
    Topic,
)
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark_server.spec import PrimSpec, WindowJoinSpec

CFG = StreamsConfig(application_id="plan-test", num_partitions=3)
W = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=2))


def streams() -> tuple[StreamsBuilder, KStream[str, int], KStream[str, str]]:
    b = StreamsBuilder()
    left = b.stream(Topic.jsonl("L", "/tmp/l"), key_type=str, value_type=int)
    right = b.stream(Topic.jsonl("R", "/tmp/r"), key_type=str, value_type=str)
    return b, left, right


def test_join_windows_factories_and_bounds() -> None:
    w = JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=3))
    assert (w.before_ms, w.after_ms, w.grace_ms) == (3000, 3000, 0)
    assert (W.before_ms, W.after_ms, W.grace_ms) == (10_000, 10_000, 2000)
    asym = W.before(timedelta(seconds=-4)).after(timedelta(seconds=5))
    assert (asym.before_ms, asym.after_ms, asym.grace_ms) == (-4000, 5000, 2000)
    with pytest.raises(InvalidArgumentError, match="before \\+ after"):
        W.before(timedelta(seconds=-11))
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=-1))
    with pytest.raises(InvalidArgumentError, match="timedelta"):
        JoinWindows.of_time_difference_and_grace(timedelta(seconds=1), 5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "mode", "prefix"),
    [
        ("join", "inner", "KSTREAM-JOIN"),
        ("left_join", "left", "KSTREAM-LEFTJOIN"),
        ("outer_join", "outer", "KSTREAM-OUTERJOIN"),
    ],
)
def test_each_join_compiles_to_the_window_join_operator(
    method: str, mode: str, prefix: str
) -> None:
    b, left, right = streams()
    joined = getattr(left, method)(right, lambda lv, rv: f"{lv}{rv}", W, value_type=str)
    joined.to(Topic.jsonl("out", "/tmp/out"))
    node = joined.node
    assert isinstance(node, n.StreamStreamJoin)
    assert node.name == f"{prefix}-0000000002"
    assert node.stores() == (f"{prefix}-STATE-STORE-0000000003",)
    (stage,) = [s for s in compile_topology(b.build(), CFG).stages() if isinstance(s, st.Stateful)]
    spec = stage.spec
    assert isinstance(spec, WindowJoinSpec)
    assert (spec.mode, spec.before_ms, spec.after_ms, spec.grace_ms) == (mode, 10_000, 10_000, 2000)
    assert spec.left.value == PrimSpec(spark="long")
    assert spec.right.value == PrimSpec(spark="string")
    assert spec.store == node.store_name and spec.processor == node.name
    # the right stream is the operator's second input, as a stream-table join's table
    assert stage.table is not None and stage.num_partitions == 3


def test_names_come_from_stream_joined_or_named() -> None:
    _, left, right = streams()
    j = left.join(right, lambda lv, rv: 1, W, StreamJoined.as_("buffers").with_name("pair"))
    assert (j.name, j.node.stores()) == ("pair", ("buffers",))
    k = left.outer_join(right, lambda lv, rv: 1, W, Named.as_("both"))
    assert k.name == "both" and k.node.stores()[0].startswith("KSTREAM-OUTERJOIN-STATE-STORE-")


def test_describe_shows_the_join_and_its_store() -> None:
    b, left, right = streams()
    left.left_join(right, lambda lv, rv: 1, W, StreamJoined.as_("buf"), value_type=int).to(
        Topic.jsonl("out", "/tmp/out")
    )
    text = b.build().describe()
    assert "Processor: KSTREAM-LEFTJOIN-0000000002 (stores: [buf])" in text
    assert "<-- KSTREAM-SOURCE-0000000000, KSTREAM-SOURCE-0000000001" in text


def test_misuse_is_refused_with_a_message() -> None:
    b, left, right = streams()
    table = b.table(Topic.jsonl("T", "/tmp/t"), key_type=str, value_type=str)
    with pytest.raises(InvalidArgumentError, match="needs JoinWindows"):
        left.join(right, lambda lv, rv: 1)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="stream-table join takes Joined"):
        left.join(table, lambda lv, rv: 1, W)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="joins two streams"):
        left.outer_join(table, lambda lv, rv: 1, W)  # type: ignore[call-overload]
    other = StreamsBuilder().stream(Topic.jsonl("X", "/tmp/x"), key_type=str, value_type=int)
    with pytest.raises(InvalidTopologyError, match="another StreamsBuilder"):
        left.join(other, lambda lv, rv: 1, W)
    ints = b.stream(Topic.jsonl("I", "/tmp/i"), key_type=int, value_type=int)
    with pytest.raises(InvalidTopologyError, match="key types differ"):
        left.join(ints, lambda lv, rv: 1, W)  # type: ignore[arg-type]
    # a stream-table join still takes Joined
    left.join(table, lambda lv, rv: 1, Joined.as_("ok"))
