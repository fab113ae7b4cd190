"""``KTable.group_by`` and its aggregations, the two operators driven directly (no Spark):
Kafka Streams' scenarios (KTableAggregateTest, KTableReduceTest, KGroupedTableImplTest),
and a property test against the reference model over random micro-batch splits and
restarts, the durable state checked against the local store after every batch."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.groupbymodel import Row, Update, aggregate, changes
from support.taskharness import Runner, close_local_stores

from kspark_server import envelope as env
from kspark_server.operators.aggregate import AggregateProcessor
from kspark_server.operators.table_group_by import TableGroupByProcessor
from kspark_server.spec import (
    AggregateSpec,
    Change,
    KeyValue,
    Packed,
    PrimSpec,
    RecordSpec,
    SpecError,
    StateOptions,
    TableGroupBySpec,
)

STR = PrimSpec(spark="string")
LONG = PrimSpec(spark="long")
CHANGE = RecordSpec(cls=Change, fields=(("new", STR), ("old", STR)))
CHECKED = StateOptions(check_log=True)


def by_first_letter(key: str, value: str) -> tuple[Any, Any]:
    """The group of a value: its first letter; "-" selects a null group, "~" a null
    value (both dropped, as Kafka Streams skips them)."""
    if value.startswith("-"):
        return None, value
    if value.startswith("~"):
        return value[:1], None
    return value[:1], value


def _less(letters: str, value: str) -> str:
    """``letters`` without one of each of ``value``'s letters."""
    rest = list(letters)
    for c in value:
        rest.remove(c)
    return "".join(rest)


OPS: dict[str, dict[str, Any]] = {
    "count": {},
    # the values' letters as a sorted multiset: subtraction undoes addition exactly
    "reduce": {
        "adder": lambda a, v: "".join(sorted(a + v)),
        "subtractor": lambda a, v: _less(a, v),
    },
    "aggregate": {
        "initializer": lambda: 0,
        "adder": lambda k, v, a: a + len(v),
        "subtractor": lambda k, v, a: a - len(v),
    },
}


def group_by_spec() -> TableGroupBySpec:
    return TableGroupBySpec(
        processor="KTABLE-SELECT",
        store="select",
        selector=by_first_letter,
        input=KeyValue(key=STR, value=STR),
        selected=KeyValue(key=STR, value=STR),
        output=KeyValue(key=STR, value=CHANGE),
        output_schema=env.envelope_json("string", CHANGE_JSON),
        packed=Packed(),
        state=CHECKED,
    )


CHANGE_JSON: Any = {
    "type": "struct",
    "fields": [env.field("new", "string"), env.field("old", "string")],
}


def aggregate_spec(op: str) -> AggregateSpec:
    fns = OPS[op]
    extra: dict[str, Any] = {}
    if op == "reduce":
        extra = {"reducer": fns["adder"], "subtractor": fns["subtractor"]}
    elif op == "aggregate":
        extra = {
            "initializer": fns["initializer"],
            "aggregator": fns["adder"],
            "subtractor": fns["subtractor"],
        }
    out = STR if op == "reduce" else LONG
    return AggregateSpec(
        processor="KTABLE-AGGREGATE",
        store="agg",
        op=op,
        input=KeyValue(key=STR, value=CHANGE),
        output=KeyValue(key=STR, value=out),
        table=True,
        output_schema=env.envelope_json("string", "string" if op == "reduce" else "long"),
        packed=Packed(),
        state=CHECKED,
        **extra,
    )


class Pipeline:
    """The re-keying operator (one source task) feeding the aggregation (one task)."""

    def __init__(
        self,
        op: str,
        tmp: Any,
        mp: pytest.MonkeyPatch,
        select: TableGroupBySpec | None = None,
        agg: AggregateSpec | None = None,
    ) -> None:
        s, a = select or group_by_spec(), agg or aggregate_spec(op)
        self.select = Runner(lambda: TableGroupByProcessor(s), tmp / "s", mp)
        self.agg = Runner(lambda: AggregateProcessor(a), tmp / "a", mp)
        self.seq = itertools.count()
        self.changes: list[Any] = []

    def restart(self) -> None:
        self.select.restart()
        self.agg.restart()

    def run(self, updates: list[Update]) -> list[Row]:
        batch = [(next(self.seq), (0, k, v, ts)) for k, v, ts in updates]
        out = self.select.run(batch)
        self.changes += [(k, v["new"], v["old"], ts) for k, v, ts in out]
        if not out:  # Spark calls no task without records
            return []
        return self.agg.run([(i, (0, k, v, ts)) for i, (k, v, ts) in enumerate(out)])


def pipeline(op: str, tmp: Any, mp: pytest.MonkeyPatch) -> Pipeline:
    return Pipeline(op, tmp, mp)


# -- Kafka Streams' scenarios ---------------------------------------------------------------


def test_a_row_that_moves_leaves_its_old_group_first(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KTableAggregateTest's shape: updates that stay in a group, move, and delete."""
    p = pipeline("aggregate", tmp_path, monkeypatch)
    got = [
        p.run([("k1", "apple", 1)]),
        p.run([("k2", "avocado", 2)]),
        p.run([("k1", "banana", 3)]),  # k1 moves from a to b
        p.run([("k2", "apricot", 4)]),  # k2 stays in a
        p.run([("k1", None, 5)]),  # k1 deleted: b goes back to 0
    ]
    close_local_stores()
    assert got == [
        [("a", 5, 1)],
        [("a", 12, 2)],
        [("a", 7, 3), ("b", 6, 3)],
        [("a", 7, 4)],
        [("b", 0, 5)],
    ]
    # a move is two records, subtraction first; a change within a group is one record
    assert p.changes == [
        ("a", "apple", None, 1),
        ("a", "avocado", None, 2),
        ("a", None, "apple", 3),
        ("b", "banana", None, 3),
        ("a", "apricot", "avocado", 4),
        ("b", None, "banana", 5),
    ]


def _strings(tmp: Any, mp: pytest.MonkeyPatch, selector: Any) -> Pipeline:
    """KTableAggregateTest's aggregation: from "0", "+v" per added value and "-v" per
    subtracted one, so the aggregate shows the order of the calls."""
    agg = dataclasses.replace(
        aggregate_spec("aggregate"),
        initializer=lambda: "0",
        aggregator=lambda k, v, a: f"{a}+{v}",
        subtractor=lambda k, v, a: f"{a}-{v}",
        output=KeyValue(key=STR, value=STR),
        output_schema=env.envelope_json("string", "string"),
    )
    select = dataclasses.replace(group_by_spec(), selector=selector)
    return Pipeline("aggregate", tmp, mp, select, agg)


def test_kafka_streams_basic_aggregation_one_update_per_batch(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KTableAggregateTest's basic scenario, grouped by the source key itself: a new value
    of a key is one change of its group, subtracted then added, at the later timestamp."""
    p = _strings(tmp_path, monkeypatch, lambda k, v: (k, v))
    updates = [("A", "1", 10), ("B", "2", 15), ("A", "3", 20), ("B", "4", 18)]
    updates += [("C", "5", 5), ("D", "6", 25), ("B", "7", 15), ("C", "8", 10)]
    got = [row for u in updates for row in p.run([u])]
    close_local_stores()
    assert got == [
        ("A", "0+1", 10),
        ("B", "0+2", 15),
        ("A", "0+1-1+3", 20),
        ("B", "0+2-2+4", 18),
        ("C", "0+5", 5),
        ("D", "0+6", 25),
        ("B", "0+2-2+4-4+7", 18),
        ("C", "0+5-5+8", 10),
    ]


def test_kafka_streams_repartition_scenario(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """KTableAggregateTest's re-grouping by value: rows move between groups, a null group
    key or no pair at all is skipped, a delete subtracts."""

    def by_value(key: str, value: str) -> tuple[str | None, str] | None:
        if key == "NULL":
            return None
        return (None if key == "null" else value), value

    p = _strings(tmp_path, monkeypatch, by_value)
    updates = [("A", "1", 1), ("B", "1", 2), ("C", "1", 3), ("null", "1", 4)]
    updates += [("NULL", "1", 5), ("A", "2", 6), ("B", None, 7), ("C", "2", 8)]
    got = [row for u in updates for row in p.run([u])]
    close_local_stores()
    assert got == [
        ("1", "0+1", 1),
        ("1", "0+1+1", 2),
        ("1", "0+1+1+1", 3),
        ("1", "0+1+1+1-1", 6),
        ("2", "0+2", 6),
        ("1", "0+1+1+1-1-1", 7),
        ("1", "0+1+1+1-1-1-1", 8),
        ("2", "0+2+2", 8),
    ]
    assert p.select.sides["dropped"] == 2


def test_count_goes_down_to_zero_and_stays(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """KGroupedTableImplTest's count: a group whose rows all left counts 0 (Kafka Streams
    keeps the row: its subtractor gives 0, not null)."""
    p = pipeline("count", tmp_path, monkeypatch)
    got = p.run([("k1", "x1", 1), ("k2", "x2", 2), ("k1", "y1", 3), ("k2", None, 4)])
    close_local_stores()
    assert got == [("y", 1, 3), ("x", 0, 4)]


def test_one_batch_emits_each_changed_group_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a record cache flushed per micro-batch, the groups' latest values only."""
    p = pipeline("reduce", tmp_path, monkeypatch)
    got = p.run([("k1", "ab", 1), ("k2", "ac", 2), ("k1", "bd", 3), ("k3", "b", 4)])
    close_local_stores()
    # a group's row takes the latest timestamp of the changes it took, a subtraction too
    assert got == [("a", "ac", 3), ("b", "bbd", 4)]


def test_null_keys_and_selections_are_dropped_and_counted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = pipeline("count", tmp_path, monkeypatch)
    got = p.run([(None, "a1", 1), ("k1", "-none", 2), ("k2", "~", 3), ("k3", "a3", 4)])
    # k3 then selects a null group: it leaves a, and the selection is dropped
    got += p.run([("k3", "-gone", 5)])
    close_local_stores()
    assert got == [("a", 1, 4), ("a", 0, 5)]
    assert p.select.sides["dropped"] == 4


def test_a_failing_selector_goes_to_the_handler_and_changes_no_group(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from kspark_server.handlers import LogAndContinueProcessingExceptionHandler as Continue
    from kspark_server.spec import Handling

    def selector(key: str, value: str) -> tuple[str, str]:
        if value == "boom":
            raise ValueError("bad row")
        return value[:1], value

    spec = dataclasses.replace(
        group_by_spec(), selector=selector, handling=Handling(processing=Continue())
    )
    r = Runner(lambda: TableGroupByProcessor(spec), tmp_path, monkeypatch)
    first = r.run([(0, (0, "k", "ab", 1))])
    failed = r.run([(1, (0, "k", "boom", 2))])
    # the key kept no selection: its next value subtracts nothing
    after = r.run([(2, (0, "k", "cd", 3))])
    close_local_stores()
    assert first == [("a", {"new": "ab", "old": None}, 1)]
    assert failed == []
    assert after == [("c", {"new": "cd", "old": None}, 3)]
    assert r.sides.get("dropped") == 1


def test_specs_refuse_a_subtractor_where_none_belongs() -> None:
    import dataclasses

    with pytest.raises(SpecError, match="subtractor goes with"):
        dataclasses.replace(aggregate_spec("aggregate"), subtractor=None)
    with pytest.raises(SpecError, match="without windows"):
        dataclasses.replace(aggregate_spec("count"), window_size_ms=10, window_advance_ms=10)


# -- the reference model, any micro-batch split, restarts ------------------------------------

updates = st.lists(
    st.tuples(
        st.sampled_from(["k1", "k2", "k3", "", "ключ", None]),
        st.sampled_from(["apple", "avocado", "banana", "blue", "cherry", "-x", "~", None]),
        st.integers(0, 30),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=120, deadline=None)
@given(
    data=updates,
    op=st.sampled_from(["count", "reduce", "aggregate"]),
    cuts=st.lists(st.integers(1, 24), max_size=4, unique=True),
    restarts=st.sets(st.integers(1, 4), max_size=2),
)
def test_property_against_the_reference_model(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Update],
    op: str,
    cuts: list[int],
    restarts: set[int],
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        p = pipeline(op, tmp_path_factory.mktemp("gb"), mp)
        bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
        split = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        got: list[list[Row]] = []
        for i, batch in enumerate(split):
            if i in restarts:
                p.restart()
            got.append(p.run(batch))
        close_local_stores()
    want_changes, dropped = changes(data, by_first_letter)
    assert p.changes == want_changes
    assert p.select.sides.get("dropped", 0) == dropped
    # the model's rows, batch by batch: each batch's change records are those of the
    # updates up to its end, less those of the batches before it
    aggs: dict[Any, Any] = {}
    want: list[list[Row]] = []
    done = 0
    for end in itertools.accumulate(len(b) for b in split):
        upto, _ = changes(data[:end], by_first_letter)
        want.append(aggregate(upto[done:], op, OPS[op], aggs))
        done = len(upto)
    assert got == want


# -- the DSL and the compiler (plan only) ---------------------------------------------------


@dataclasses.dataclass
class Customer:
    name: str
    region: str


def test_the_grouped_table_compiles_to_two_operators() -> None:
    from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
    from kspark.compiler import compile_topology
    from kspark.compiler import stages as stg
    from kspark.plan.grouped import Aggregate, TableGroupBy
    from kspark_server.spec import check_spec

    b = StreamsBuilder()
    customers = b.table(Topic.jsonl("c", "/tmp/c"), key_type=str, value_type=Customer)
    by_region = customers.group_by(lambda k, c: (c.region, c), key_type=str, value_type=Customer)
    names = by_region.reduce(lambda a, c: c, lambda a, c: a, materialized=Materialized.as_("n"))
    names.to_stream().to(Topic.jsonl("o", "/tmp/o"))
    node = names.node
    assert isinstance(node, Aggregate) and isinstance(node.parent, TableGroupBy)
    assert node.grouped_table and node.repartitions and names.store_name == "n"
    out = compile_topology(b.build(), StreamsConfig(application_id="g"))
    stateful = [s.spec for s in out.stages() if isinstance(s, stg.Stateful)]
    select, agg = (check_spec(s) for s in stateful)
    assert isinstance(select, TableGroupBySpec) and isinstance(agg, AggregateSpec)
    assert select.output.value == RecordSpec(
        cls=Change, fields=(("new", select.selected.value), ("old", select.selected.value))
    )
    # the reduction's table holds the selected values, not their changes
    assert agg.table and agg.subtractor is not None and agg.output.value == select.selected.value


def test_the_plan_refuses_a_grouped_table_aggregate_without_subtractor() -> None:
    from kspark import StreamsBuilder
    from kspark.errors import InvalidTopologyError
    from kspark.plan.grouped import Aggregate

    b = StreamsBuilder()
    grouped = b.table("t", key_type=str, value_type=str).group_by(
        lambda k, v: (v, v), key_type=str, value_type=str
    )
    with pytest.raises(InvalidTopologyError, match="subtractor"):
        Aggregate(
            name="A",
            parent=grouped._node,
            op="reduce",
            reducer=lambda a, v: v,
            store_name="s",
            key_type=None,
            value_type=None,
        )


def test_changes_as_json_text_without_their_none_field(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Change of a record of strings and numbers travels into the aggregation as JSON
    text, which Spark's ``to_json`` writes without its None field."""
    spec = dataclasses.replace(aggregate_spec("aggregate"), packed=Packed(value=True))
    r = Runner(lambda: AggregateProcessor(spec), tmp_path, monkeypatch)
    got = r.run(
        [
            (0, (0, "a", '{"new":"apple"}', 1)),
            (1, (0, "a", '{"new":"avocado","old":"apple"}', 2)),
            (2, (0, "b", '{"new":"banana"}', 3)),
        ]
    )
    got += r.run([(3, (0, "a", '{"old":"avocado"}', 4))])
    close_local_stores()
    assert got == [("a", 7, 2), ("b", 6, 3), ("a", 0, 4)]


def _run_queues(r: Runner, queues: list[list[tuple[Any, Any, int]]]) -> list[Row]:
    """One aggregation batch of the change records of several re-keying tasks, each task's
    records one queue (topic: the re-keying processor, partition: its task)."""
    import pandas as pd

    from kspark_server import placement

    rows = [
        {
            "key": k,
            "value": v,
            "timestamp": ts,
            "headers": None,
            "topic": "KTABLE-SELECT",
            "partition": q,
            "offset": i,
            "ks_seq": i,
            "ks_sub": i,
            "ks_side": None,
            "ks_hash": 7,
            "ks_task": 0,
        }
        for q, recs in enumerate(queues)
        for i, (k, v, ts) in enumerate(recs)
    ]
    if not rows:
        return []
    out: list[dict[str, Any]] = []
    key = (placement.task_keys(1)[0],)
    table = r.durable.run(r.proc, key, pd.DataFrame(rows))
    out += [x for x in ([] if table is None else table.to_pylist()) if x["ks_side"] is None]
    return [(x["key"], x["value"], int(x["timestamp"])) for x in out]


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.integers(0, 1),
            st.sampled_from(["k1", "k2", "k3"]),
            st.sampled_from(["apple", "avocado", "banana", "cherry", None]),
            st.integers(0, 30),
        ),
        min_size=1,
        max_size=20,
    ),
    op=st.sampled_from(["count", "aggregate"]),
    cuts=st.lists(st.integers(1, 19), max_size=3, unique=True),
)
def test_two_source_tasks_give_one_final_table_whatever_the_split(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[int, str, str | None, int]],
    op: str,
    cuts: list[int],
) -> None:
    """Changes of two source tasks meet in a group in timestamp order, which a split can
    change; adders and subtractors that commute give the same final table anyway."""
    tmp = tmp_path_factory.mktemp("two")
    with pytest.MonkeyPatch.context() as mp:
        selects = [
            Runner(lambda: TableGroupByProcessor(group_by_spec()), tmp / f"s{t}", mp)
            for t in (0, 1)
        ]
        agg = Runner(lambda: AggregateProcessor(aggregate_spec(op)), tmp / "a", mp)
        bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
        final: dict[Any, Any] = {}
        for n, (a, b) in enumerate(itertools.pairwise(bounds)):
            queues = []
            for t in (0, 1):
                mine = [
                    (100 * n + i, (0, f"{t}{k}", v, ts))
                    for i, (q, k, v, ts) in enumerate(data[a:b])
                    if q == t
                ]
                got = selects[t].run(mine) if mine else []
                queues.append(got)
            for k, v, _ in _run_queues(agg, queues):
                final[k] = v
        close_local_stores()
    # the model: each task's changes in its order, all applied (order across tasks free)
    aggs: dict[Any, Any] = {}
    for t in (0, 1):
        updates = [(f"{t}{k}", v, ts) for q, k, v, ts in data if q == t]
        recs, _ = changes(updates, by_first_letter)
        aggregate(recs, op, OPS[op], aggs)
    assert final == {g: a for g, (a, _) in aggs.items() if not isinstance(g, tuple)}
