"""Plan-only tests of ``KStream.filter_expr``: the node, its checks, and its stage."""

from __future__ import annotations

import dataclasses

import pytest

from kspark import Named, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import InvalidArgumentError
from kspark.plan import nodes as n


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


@dataclasses.dataclass
class Keyed:
    key: str
    Timestamp: int
    n: int


CFG = StreamsConfig(application_id="plan-test", num_partitions=3)


def _stages(b: StreamsBuilder) -> list[st.Stage]:
    return compile_topology(b.build(), CFG).stages()


def test_filter_expr_is_a_named_filter_node_that_keeps_the_types() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=Payment)
    f = s.filter_expr("amount > 100")
    assert isinstance(f.node, n.FilterExpr)
    assert f.name == "KSTREAM-FILTER-0000000001"
    assert (f.node.key_type, f.node.value_type) == (s.node.key_type, s.node.value_type)
    assert s.filter_expr("amount > 1", Named.as_("big")).name == "big"


def test_filter_expr_compiles_to_a_jvm_stage_that_cuts_the_python_chain() -> None:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=Payment)
        .map_values(lambda v: Payment(v.id, v.amount * 2), value_type=Payment)
        .filter_expr("amount > 100 AND key <> 'x'")
        .peek(lambda k, v: None)
        .to(Topic.parquet("out", "/tmp/out"))
    )
    stages = _stages(b)
    kinds = [type(s).__name__ for s in stages]
    assert kinds == ["Read", "Chain", "SqlFilter", "Chain"]
    sql = stages[2]
    assert isinstance(sql, st.SqlFilter)
    assert sql.processor == "KSTREAM-FILTER-0000000002"
    assert sql.condition == "amount > 100 AND key <> 'x'"
    assert sql.scope == (
        ("id", "value.id"),
        ("amount", "value.amount"),
        ("key", "key"),
        ("timestamp", "timestamp"),
    )


def test_filter_expr_first_needs_no_python_at_all() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=Payment).filter_expr(
        "amount > 100"
    ).to(Topic.parquet("out", "/tmp/out"))
    assert [type(s).__name__ for s in _stages(b)] == ["Read", "SqlFilter"]


def test_a_value_field_hides_the_record_column_of_its_name_ignoring_case() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=Keyed).filter_expr("n > 0").to(
        Topic.parquet("out", "/tmp/out")
    )
    sql = _stages(b)[1]
    assert isinstance(sql, st.SqlFilter)
    assert sql.scope == (("key", "value.key"), ("Timestamp", "value.Timestamp"), ("n", "value.n"))


def test_a_primitive_value_is_the_column_value() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=int).filter_expr(
        "value % 2 = 0"
    ).to(Topic.parquet("out", "/tmp/out"))
    sql = _stages(b)[1]
    assert isinstance(sql, st.SqlFilter)
    assert sql.scope == (("value", "value"), ("key", "key"), ("timestamp", "timestamp"))


def test_filter_expr_on_dynamic_values_is_refused_naming_the_processor() -> None:
    s = StreamsBuilder().stream("clicks")
    with pytest.raises(InvalidArgumentError, match=r"KSTREAM-FILTER-0000000001.*declared value"):
        s.filter_expr("page <> '/health'")


@pytest.mark.parametrize("condition", ["", "   ", None, 42])
def test_filter_expr_needs_a_condition(condition: object) -> None:
    s = StreamsBuilder().stream(Topic.jsonl("p", "/tmp/p"), key_type=str, value_type=Payment)
    with pytest.raises(InvalidArgumentError, match=r"KSTREAM-FILTER-0000000001.*condition"):
        s.filter_expr(condition)  # type: ignore[arg-type]
