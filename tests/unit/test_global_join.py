"""Stream-global-table joins without Spark: the plan and compiled stages, the key
selector's stage, and the join operator in its global mode against a reference model of
Kafka Streams' ``KStreamKTableJoinProcessor`` (as its global-table join tests use it) over
random micro-batch splits and restarts."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support import taskharness
from support.joinmodel import processing_order
from support.taskharness import close_local_stores

from kspark import (
    GlobalKTable,
    Materialized,
    StreamsBuilder,
    StreamsConfig,
    Topic,
)
from kspark.compiler import stages as stg
from kspark.compiler.compiler import compile_topology
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark_server import envelope as env
from kspark_server import transport
from kspark_server.joinkeys import make_join_key_stage
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.spec import (
    JoinKeySpec,
    JoinSpec,
    KeyValue,
    Packed,
    PrimSpec,
    StateOptions,
)

STR = PrimSpec(spark="string")
KV = KeyValue(key=STR, value=STR)

#: (side: 0 stream, 1 table; the stream record's own key; the table key; value; timestamp)
Rec = tuple[int, str | None, str | None, str | None, int]
Out = tuple[str | None, str, int]


def joiner(k: str | None, v: str, t: str | None) -> str:
    # the stream record's own key, not the table key
    return f"{k}:{v}+{t}"


def make_spec(left: bool, the_joiner: Any = joiner) -> JoinSpec:
    return JoinSpec(
        processor="JOIN",
        store="rates",
        left=left,
        versioned=False,
        history_retention_ms=0,
        grace_ms=0,
        joiner=the_joiner,
        joiner_with_key=the_joiner is joiner,
        stream=KV,
        table=KV,
        output=KV,
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        global_table=True,
        state=StateOptions(check_log=True),
    )


def reference(records: list[Rec], left: bool) -> tuple[list[Out], dict[str, int]]:
    """Kafka Streams' stream-global-table join, record by record: the table's latest
    value per key; a stream record with a null value is dropped, one whose selector gave
    None too (in a left join only if its own key is not null, KIP-962); the rest join
    the table's value for their table key, an inner join only where there is one."""
    table: dict[str, str] = {}
    out: list[Out] = []
    dropped: dict[str, int] = {}
    for side, own, gkey, v, ts in records:
        if side:
            if gkey is None:
                dropped["null-key"] = dropped.get("null-key", 0) + 1
            elif v is None:
                table.pop(gkey, None)
            else:
                table[gkey] = v
            continue
        if v is None:
            dropped["null-value"] = dropped.get("null-value", 0) + 1
            continue
        if gkey is None and (not left or own is not None):
            dropped["null-join-key"] = dropped.get("null-join-key", 0) + 1
            continue
        t = None if gkey is None else table.get(gkey)
        if t is None and not left:
            continue
        out.append((own, joiner(own, v, t), ts))
    return out, dropped


def frame(batch: list[tuple[int, Rec]]) -> pd.DataFrame:
    """A task's input rows as the lowering makes them: ``key`` the stream record's own
    key (null for a table update), ``ks_gkey`` the table key."""
    rows = []
    for seq, (side, own, gkey, value, ts) in batch:
        rows.append(
            {
                "key": None if side else own,
                "value": None if side else value,
                "timestamp": ts,
                "headers": None,
                "topic": "T" if side else "S",
                "partition": 0,
                "offset": seq,
                "ks_seq": seq,
                "ks_sub": 0,
                "ks_side": None,
                "ks_tvalue": value if side else None,
                "ks_jside": side,
                "ks_gkey": gkey,
                "ks_hash": 7 if gkey is None else len(gkey),
                "ks_task": 0,
            }
        )
    return pd.DataFrame(rows)


class Runner(taskharness.Runner):
    """One task of the join across batches, with its dropped records by reason; the
    outputs in the order the operator emits them."""

    by_input_position = False

    def __init__(self, spec: JoinSpec, tmp: Any, mp: pytest.MonkeyPatch) -> None:
        self.dropped: dict[str, int] = {}
        super().__init__(lambda: JoinProcessor(spec), tmp, mp)

    def input_rows(self, batch: list[tuple[int, Any]]) -> pd.DataFrame:
        return frame(batch)

    def count_side(self, side: dict[str, Any]) -> None:
        super().count_side(side)
        if side["kind"] == "dropped":
            self.dropped[side["reason"]] = self.dropped.get(side["reason"], 0) + side["count"]

    def output(self, row: dict[str, Any]) -> Out:
        assert "ks_gkey" not in row  # the output is the stream's envelope
        out: Out = super().output(row)
        return out


records = st.lists(
    st.one_of(
        st.tuples(
            st.just(1),
            st.none(),
            st.sampled_from(["a", "b", "", "é"]) | st.none(),
            st.sampled_from(["x", "y"]) | st.none(),
            st.integers(0, 30),
        ),
        st.tuples(
            st.just(0),
            st.sampled_from(["s", "t"]) | st.none(),
            st.sampled_from(["a", "b", "", "é"]) | st.none(),
            st.sampled_from(["p", "q"]) | st.none(),
            st.integers(0, 30),
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@example(  # Kafka's scenario: a table update after the stream record is not seen
    data=[(0, "s", "a", "p", 1), (1, None, "a", "x", 2), (0, "s", "a", "q", 3)],
    cuts=[1],
    restarts=[True, False, False, False],
    left=True,
)
@given(
    data=records,
    cuts=st.lists(st.integers(1, 29), max_size=3, unique=True),
    restarts=st.lists(st.booleans(), min_size=4, max_size=4),
    left=st.booleans(),
)
def test_the_operator_matches_the_reference_for_any_split_and_restart(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    left: bool,
) -> None:
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    numbered = list(enumerate(data))
    batches = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    # the order the task takes its records in: per batch, the two topics merged by time
    seen: list[Rec] = []
    for batch in batches:
        merged = processing_order([(i, (r[0], r[2], r[3], r[4])) for i, r in batch])
        seen.extend(data[i] for i, _ in merged)
    want, dropped = reference(seen, left)
    tmp = tmp_path_factory.mktemp("global")
    with pytest.MonkeyPatch.context() as mp:
        runner = Runner(make_spec(left), tmp, mp)
        got: list[Out] = []
        try:
            for batch, restart in zip(batches, restarts, strict=False):
                got.extend(runner.run(batch))
                if restart:
                    runner.restart()
        finally:
            close_local_stores()
    assert got == want
    assert runner.dropped == dropped


# -- Kafka Streams' scenarios -----------------------------------------------------------
# KStreamGlobalKTableJoinTest and KStreamGlobalKTableLeftJoinTest, one step per micro-batch:
# stream values "X<i>,FKey<i>" (the part after the comma is the table key), table values
# "Y<i>" for keys "FKey<i>", each topic's timestamps rising from 0 by 1


def _stream(n: int, prefix: str, first: int, with_fk: bool = True, null_key: bool = False) -> Any:
    return [
        (
            0,
            None if null_key and i == 0 else str(i),
            f"FKey{i}" if with_fk else None,
            f"{prefix}{i}" + (f",FKey{i}" if with_fk else ""),
            first + i,
        )
        for i in range(n)
    ]


def _table(n: int, prefix: str | None, first: int) -> Any:
    return [
        (1, None, f"FKey{i}", None if prefix is None else f"{prefix}{i}", first + i)
        for i in range(n)
    ]


def _plain(v: str, t: str | None) -> str:
    return f"{v}+{t}"


SCENARIOS: dict[str, tuple[list[Any], list[list[Out]], list[list[Out]]]] = {
    # the table's updates emit nothing; a stream record joins the value its key has then
    "not-on-table-updates": (
        [
            _stream(2, "X", 0),
            _table(2, "Y", 0),
            _stream(4, "X", 2),
            _table(4, "YY", 2),
            _stream(4, "X", 6),
            _table(4, "YYY", 6),
        ],
        [
            [],
            [],
            [("0", "X0,FKey0+Y0", 2), ("1", "X1,FKey1+Y1", 3)],
            [],
            [(str(i), f"X{i},FKey{i}+YY{i}", 6 + i) for i in range(4)],
            [],
        ],
        [
            [("0", "X0,FKey0+None", 0), ("1", "X1,FKey1+None", 1)],
            [],
            [
                ("0", "X0,FKey0+Y0", 2),
                ("1", "X1,FKey1+Y1", 3),
                ("2", "X2,FKey2+None", 4),
                ("3", "X3,FKey3+None", 5),
            ],
            [],
            [(str(i), f"X{i},FKey{i}+YY{i}", 6 + i) for i in range(4)],
            [],
        ],
    ),
    # tombstones delete the table's keys
    "tombstones": (
        [_table(4, "Y", 0), _stream(4, "X", 0), _table(2, None, 4), _stream(4, "XX", 4)],
        [
            [],
            [(str(i), f"X{i},FKey{i}+Y{i}", i) for i in range(4)],
            [],
            [("2", "XX2,FKey2+Y2", 6), ("3", "XX3,FKey3+Y3", 7)],
        ],
        [
            [],
            [(str(i), f"X{i},FKey{i}+Y{i}", i) for i in range(4)],
            [],
            [
                ("0", "XX0,FKey0+None", 4),
                ("1", "XX1,FKey1+None", 5),
                ("2", "XX2,FKey2+Y2", 6),
                ("3", "XX3,FKey3+Y3", 7),
            ],
        ],
    ),
    # no table key: neither join emits
    "null-key-selector": (
        [_table(4, "Y", 0), _stream(4, "XXX", 0, with_fk=False)],
        [[], []],
        [[], []],
    ),
    # a null stream key joins by its table key
    "null-stream-key": (
        [_table(2, "Y", 0), _stream(4, "X", 0, null_key=True)],
        [[], [(None, "X0,FKey0+Y0", 0), ("1", "X1,FKey1+Y1", 1)]],
        [
            [],
            [
                (None, "X0,FKey0+Y0", 0),
                ("1", "X1,FKey1+Y1", 1),
                ("2", "X2,FKey2+None", 2),
                ("3", "X3,FKey3+None", 3),
            ],
        ],
    ),
}


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_kafka_streams_scenarios(
    tmp_path_factory: pytest.TempPathFactory, name: str, left: bool
) -> None:
    steps, inner_want, left_want = SCENARIOS[name]
    tmp = tmp_path_factory.mktemp("scenario")
    seq = itertools.count()
    with pytest.MonkeyPatch.context() as mp:
        runner = Runner(make_spec(left, _plain), tmp, mp)
        try:
            got = [runner.run([(next(seq), r) for r in step]) for step in steps]
        finally:
            close_local_stores()
    assert got == (left_want if left else inner_want)


# -- the key selector's stage -----------------------------------------------------------


def _key_stage(selector: Any) -> Any:
    spec = JoinKeySpec(
        processor="JOIN",
        input=KV,
        key_selector=selector,
        table_key=STR,
        output_schema=env.envelope_json("string", "string", [env.field("ks_gkey", "string")]),
    )
    return make_join_key_stage(spec)


def _rows(records: list[tuple[str | None, str | None]]) -> pa.RecordBatch:
    schema = transport.arrow_schema(env.envelope_json("string", "string"))
    rows = [
        {"key": k, "value": v, "timestamp": i, "offset": i, "ks_seq": i, "ks_sub": 0}
        for i, (k, v) in enumerate(records)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def test_the_key_stage_adds_the_table_key_and_skips_null_values() -> None:
    calls: list[tuple[Any, Any]] = []

    def selector(k: str | None, v: str) -> str | None:
        calls.append((k, v))
        return v.split(",")[1] if "," in v else None

    run = _key_stage(selector)
    out = list(run([_rows([("a", "x,K"), (None, "y,L"), ("c", "z"), ("d", None)])]))
    got = pa.Table.from_batches(out).to_pylist()
    assert [(r["key"], r["value"], r["ks_gkey"]) for r in got] == [
        ("a", "x,K", "K"),
        (None, "y,L", "L"),
        ("c", "z", None),
        ("d", None, None),  # the join drops it: the selector never sees a null value
    ]
    assert ("d", None) not in calls


def test_a_selector_that_fails_or_gives_another_type_goes_to_the_handler() -> None:
    from kspark_server.handling import ProcessingFailed

    with pytest.raises(ProcessingFailed, match="JOIN"):
        list(_key_stage(lambda k, v: 1 / 0)([_rows([("a", "x")])]))
    # a table of str keys: an int is not a key of it
    with pytest.raises(ProcessingFailed, match="declared type is string"):
        list(_key_stage(lambda k, v: 5)([_rows([("a", "x")])]))


# -- the plan and the compiled stages ----------------------------------------------------


def _builder() -> tuple[StreamsBuilder, GlobalKTable[str, float], Any]:
    b = StreamsBuilder()
    rates = b.global_table(
        Topic.jsonl("rates", "/tmp/r"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_("rates"),
    )
    pays = b.stream(Topic.jsonl("pays", "/tmp/p"), key_type=int, value_type=str)
    return b, rates, pays


def test_the_join_keeps_the_streams_key_type_and_compiles_to_a_keyed_join() -> None:
    b, rates, pays = _builder()
    joined = pays.join(rates, lambda k, v: v, lambda v, r: r, value_type=float)
    node = joined.node
    assert isinstance(node, n.StreamGlobalTableJoin)
    assert node.name == "KSTREAM-JOIN-0000000002" and node.stores() == ("rates",)
    assert node.key_type == pays.node.key_type and not node.left
    left = pays.left_join(rates, lambda k, v: v, lambda k, v, r: str(r), "conv", value_type=str)
    assert left.name == "conv" and left.node.stores() == ("rates-conv",)
    joined.to(Topic.jsonl("out", "/tmp/o"))
    left.to(Topic.jsonl("out2", "/tmp/o2"))
    out = compile_topology(b.build(), StreamsConfig(application_id="g"))
    joins = [s for s in out.stages() if isinstance(s, stg.Stateful)]
    assert [(s.task_column, s.spec.store) for s in joins] == [
        ("ks_gkey", "rates"),
        ("ks_gkey", "rates-conv"),
    ]
    for s in joins:
        assert isinstance(s.spec, JoinSpec) and s.spec.global_table
        assert s.spec.stream.key == PrimSpec(spark="long")  # the stream's own key
        assert s.spec.table.key == STR
        assert isinstance(s.stream, stg.JoinKeyStage) and isinstance(s.table, stg.Read)
    assert isinstance(joins[1].spec, JoinSpec) and joins[1].spec.joiner_with_key


def test_what_a_global_table_join_refuses() -> None:
    b, rates, pays = _builder()
    with pytest.raises(InvalidArgumentError, match="global table joins with"):
        pays.join(rates, lambda v, r: r)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="key_selector"):
        pays.join(rates, lambda v: v, lambda v, r: r)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="goes with a GlobalKTable"):
        table = b.table("t", key_type=int, value_type=str)
        pays.join(table, lambda k, v: v, lambda v, r: r)  # type: ignore[call-overload]
    with pytest.raises(InvalidTopologyError, match="another StreamsBuilder"):
        other = StreamsBuilder().global_table("x", key_type=str, value_type=str)
        pays.join(other, lambda k, v: v, lambda v, r: r)
    with pytest.raises(InvalidTopologyError, match="latest value"):
        b.global_table(
            "v",
            key_type=str,
            value_type=str,
            materialized=Materialized.as_versioned("v", timedelta(minutes=1)),
        )


def test_an_unjoined_global_table_is_not_part_of_the_topology() -> None:
    b, _rates, pays = _builder()
    pays.to("out")
    assert [x.name for x in b.build().nodes()] == [
        "KSTREAM-SOURCE-0000000001",
        "KSTREAM-SINK-0000000002",
    ]
