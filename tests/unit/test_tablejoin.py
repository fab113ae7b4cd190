"""The same-key table-table join operator, driven directly (no Spark): Kafka Streams'
scenarios, and a property test against the reference model over random micro-batch
splits and restarts, with the durable state checked against the local store after every
batch."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.joinmodel import processing_order
from support.tablejoinmodel import table_join_reference
from support.taskharness import Rec, Runner, close_local_stores

from kspark_server import envelope as env
from kspark_server.operators.table_join import TableJoinProcessor
from kspark_server.spec import KeyValue, Packed, PrimSpec, SpecError, StateOptions, TableJoinSpec

STR = PrimSpec(spark="string")
KV = KeyValue(key=STR, value=STR)


def joiner(left: str | None, right: str | None) -> str:
    return f"{left}+{right}"


def make_spec(mode: str, state: StateOptions | None = None) -> TableJoinSpec:
    return TableJoinSpec(
        processor="JOIN",
        store="joined",
        mode=mode,
        joiner=joiner,
        joiner_with_key=False,
        left=KV,
        right=KV,
        output=KV,
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        state=state or StateOptions(),
    )


def runner(
    mode: str, tmp: Any, mp: pytest.MonkeyPatch, state: StateOptions | None = None
) -> Runner:
    return Runner(lambda: TableJoinProcessor(make_spec(mode, state)), tmp, mp)


def test_a_spec_refuses_an_unknown_mode() -> None:
    with pytest.raises(SpecError, match="unknown table-table join mode"):
        make_spec("cross")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # the right side's delete: a tombstone where the row existed; the left side's
        # delete of a key the right never had: nothing in an inner join
        ("inner", [("k", "l1+r1", 2), ("k", None, 3)]),
        ("left", [("k", "l1+None", 1), ("k", "l1+r1", 2), ("k", "l1+None", 3), ("k", None, 4)]),
        ("outer", [("k", "l1+None", 1), ("k", "l1+r1", 2), ("k", "l1+None", 3), ("k", None, 4)]),
    ],
)
def test_which_change_emits_what(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str, expected: list[Any]
) -> None:
    r = runner(mode, tmp_path, monkeypatch)
    got = []
    for i, rec in enumerate(
        [(0, "k", "l1", 1), (1, "k", "r1", 2), (1, "k", None, 3), (0, "k", None, 4)]
    ):
        got += r.run([(i, rec)])
    close_local_stores()
    assert got == expected


def test_a_delete_of_a_key_neither_side_has_emits_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for mode in ("inner", "left", "outer"):
        r = runner(mode, tmp_path / mode, monkeypatch)
        assert r.run([(0, (0, "k", None, 1)), (1, (1, "k", None, 2))]) == []
    close_local_stores()


def test_the_result_takes_the_later_timestamp_and_the_emission_order(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = runner("outer", tmp_path, monkeypatch)
    # piped left first at 9, the right at 5: the right is taken first (the smaller
    # head timestamp), and the sink writes the results in that order
    got = r.run([(0, (0, "k", "l", 9)), (1, (1, "k", "r", 5))])
    close_local_stores()
    assert got == [("k", "None+r", 5), ("k", "l+r", 9)]


updates = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["a", "b", "c", None]),
        st.sampled_from(["x", "y", None]) | st.sampled_from(["z"]),
        st.integers(0, 30),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(
    data=updates,
    mode=st.sampled_from(["inner", "left", "outer"]),
    cuts=st.lists(st.integers(1, 29), max_size=4, unique=True),
    restarts=st.sets(st.integers(1, 4), max_size=2),
)
def test_property_against_the_reference_model(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Rec],
    mode: str,
    cuts: list[int],
    restarts: set[int],
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        # the durable base (in small chunks) and log read back after every batch
        checked = StateOptions(base_chunk_bytes=64, check_log=True)
        r = runner(mode, tmp_path_factory.mktemp("tj"), mp, checked)
        numbered = list(enumerate(data))
        bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
        split = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        got = []
        for i, batch in enumerate(split):
            if i in restarts:
                r.restart()
            got += r.run(batch)
        close_local_stores()
    seen = [rec for batch in split for _, rec in processing_order(batch)]
    want, _, dropped = table_join_reference(seen, mode, joiner)
    assert got == want
    assert r.sides.get("dropped", 0) == dropped


# -- the DSL and the compiler (plan only) ---------------------------------------------------


def test_the_joined_table_is_a_table_with_its_own_store() -> None:
    from kspark import Materialized, StreamsBuilder
    from kspark.plan import nodes as n

    b = StreamsBuilder()
    t1 = b.table("a", key_type=str, value_type=str)
    t2 = b.table("b", key_type=str, value_type=str)
    joined = t1.outer_join(t2, joiner, materialized=Materialized.as_("ab"), value_type=str)
    node = joined.node
    assert isinstance(node, n.TableTableJoin) and node.mode == "outer"
    assert node.stores() == ("ab",) and joined.store_name == "ab"
    # a stream joined against the result keeps its own copy of it
    s = b.stream("s", key_type=str, value_type=str)
    s.join(joined.filter(lambda k, v: True), joiner, value_type=str).to("out")
    assert "Processor: KTABLE-MERGE" in b.build().describe()


def test_versioned_tables_and_other_keys_are_refused() -> None:
    from datetime import timedelta

    from kspark import Materialized, StreamsBuilder
    from kspark.errors import InvalidTopologyError

    b = StreamsBuilder()
    t1 = b.table("a", key_type=str, value_type=str)
    v = b.table(
        "v",
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("v", timedelta(hours=1)),
    )
    t3 = b.table("c", key_type=int, value_type=str)
    with pytest.raises(InvalidTopologyError, match="versioned table"):
        t1.join(v, joiner, value_type=str)
    with pytest.raises(InvalidTopologyError, match="key types differ"):
        t1.left_join(t3, joiner, value_type=str)
    with pytest.raises(InvalidTopologyError, match="latest-value table"):
        t1.join(t1, joiner, materialized=Materialized.as_versioned("x", timedelta(1)))


def test_a_table_joins_only_a_table() -> None:
    # the typed overloads say so to mypy; this tells an untyped caller, naming the table
    from kspark import StreamsBuilder
    from kspark.errors import InvalidArgumentError

    b = StreamsBuilder()
    t = b.table("a", key_type=str, value_type=str)
    s: Any = b.stream("s", key_type=str, value_type=str)
    with pytest.raises(
        InvalidArgumentError, match=r"inner join of KTABLE-SOURCE-0+: a table joins a"
    ):
        t.join(s, joiner, value_type=str)
    with pytest.raises(InvalidArgumentError, match=r"left join of .*: a foreign-key join joins a"):
        t.left_join(s, lambda v: v, joiner, value_type=str)


def test_the_results_are_one_queue_in_emission_order(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader after the join (another join, an aggregation) takes each queue's records
    in position order and merges queues by timestamp: the results of a task must be one
    queue, or a later result with a smaller timestamp would overtake an earlier one."""
    from support.taskharness import frame

    from kspark_server import placement
    from kspark_server.operators.arrow import order

    r = runner("left", tmp_path, monkeypatch)
    assert r.run([(0, (0, "k", "l", 20))]) == [("k", "l+None", 20)]
    # the right update is taken first (5 < 6) and its result is at 20; the left update's
    # result, emitted after it, is at 6
    batch = [(1, (1, "k", "r", 5)), (2, (0, "k", "l2", 6))]
    key = (placement.task_keys(1)[0],)
    rows = []
    table = r.durable.run(r.proc, key, frame(batch))
    assert table is not None
    rows = [x for x in table.to_pylist() if x["ks_side"] is None]
    close_local_stores()
    assert [(x["value"], x["timestamp"]) for x in rows] == [("l+r", 20), ("l2+r", 6)]
    assert len({(x["topic"], x["partition"]) for x in rows}) == 1
    import pandas as pd

    again = pd.DataFrame(rows).assign(ks_jside=0)
    assert [rows[int(i)]["value"] for i in order(again)] == ["l+r", "l2+r"]
