"""``KStream.filter_expr``: a Spark SQL condition run in the JVM, through the test driver."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.errors import DeadLetterQueueProcessingExceptionHandler, InvalidTopologyError
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Payment:
    id: str
    amount: int
    currency: str | None


def cfg(app_id: str, **kw: Any) -> StreamsConfig:
    return StreamsConfig(application_id=app_id, num_partitions=2, **kw)


def test_condition_over_value_fields_key_and_timestamp(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=Payment).filter_expr(
        "amount > 100 AND key LIKE 'eu-%' AND timestamp >= 2 AND currency IS NOT NULL"
    ).to(Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=Payment)
        src.pipe_input("eu-1", Payment("p1", 500, "EUR"), timestamp=1)  # too early
        src.pipe_input("eu-2", Payment("p2", 500, "EUR"), timestamp=2, headers=[("h", b"1")])
        src.pipe_input("us-3", Payment("p3", 500, "USD"), timestamp=3)  # key
        src.pipe_input("eu-4", Payment("p4", 100, "EUR"), timestamp=4)  # amount
        src.pipe_input("eu-5", Payment("p5", 101, None), timestamp=5)  # null currency
        src.pipe_input("eu-6", None, timestamp=6)  # null value: fields null, dropped
        src.pipe_input("eu-7", Payment("p7", 101, "EUR"), timestamp=7)
        out = d.create_output_topic("out", key_type=str, value_type=Payment).read_records()
        assert [(r.key, r.value.id, r.timestamp) for r in out] == [
            ("eu-2", "p2", 2),
            ("eu-7", "p7", 7),
        ]
        assert out[0].headers == (("h", b"1"),)  # the envelope passes unchanged


def test_a_primitive_value_is_value_and_python_steps_run_around_it(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
        .map_values(lambda v: v * 3, value_type=int)
        .filter_expr("value % 2 = 0")
        .map_values(lambda k, v: f"{k}:{v}", value_type=str)
        .to(Topic.jsonl("out", "/unused"))
    )
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_records([("a", 1, 1), ("b", 2, 2), ("c", 4, 3), ("d", 5, 4)])
        out = d.create_output_topic("out", key_type=str, value_type=str)
        assert out.read_values() == ["b:6", "c:12"]


def test_dead_letters_from_before_the_filter_pass_it(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
        .map_values(lambda v: 100 // v, value_type=int)
        .filter_expr("value > 30")  # a dead letter's row has no value: it must still pass
        .to(Topic.jsonl("out", "/unused"))
    )
    config = cfg(
        app_id,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler(),
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    with TopologyTestDriver(b.build(), config, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_records([("a", 1, 1), ("b", 0, 2), ("c", 5, 3)])
        out = d.create_output_topic("out", key_type=str, value_type=int)
        assert out.read_key_values() == [("a", 100)]
        (dead,) = d.dead_letter_topic().read_raw()
        assert dead["processor_node_id"] == "KSTREAM-MAPVALUES-0000000001"
        assert d.metrics().dead_letter_records == 1


@pytest.mark.parametrize(
    ("condition", "said"),
    [
        ("amount >", "PARSE"),  # does not parse
        ("price > 100", "price"),  # no such column
        ("amount + 1", "boolean"),  # not a condition
    ],
)
def test_a_bad_condition_stops_the_start_naming_the_processor(
    spark: Any, app_id: str, condition: str, said: str
) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=Payment).filter_expr(
        condition
    ).to(Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        d.create_input_topic("in", key_type=str, value_type=Payment).pipe_input(
            "k", Payment("p", 1, "EUR")
        )
        with pytest.raises(InvalidTopologyError) as err:
            d.process()
    message = str(err.value)
    assert "KSTREAM-FILTER-0000000001" in message and condition in message
    assert said.lower() in message.lower()


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    payments=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", None]),
            st.one_of(st.none(), st.integers(-1000, 1000)),
            st.sampled_from(["EUR", "USD", None]),
        ),
        max_size=12,
    ),
    limit=st.integers(-100, 100),
)
def test_property_against_a_python_reference(
    spark: Any, payments: list[tuple[str | None, int | None, str | None]], limit: int
) -> None:
    """What passes is what Python's three-valued reading of the condition keeps."""
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=Payment).filter_expr(
        f"amount > {limit} OR currency = 'EUR'"
    ).to(Topic.jsonl("out", "/unused"))
    records = [
        (k, None if amount is None else Payment(f"p{i}", amount, cur), i)
        for i, (k, amount, cur) in enumerate(payments)
    ]

    def keeps(v: Payment | None) -> bool:
        # SQL: null OR true is true; null OR null/false is null, and null drops
        return v is not None and (v.amount > limit or v.currency == "EUR")

    expected = [(k, v.id) for k, v, _ in records if v is not None and keeps(v)]
    app = f"filter-expr-prop-{uuid.uuid4().hex[:8]}"
    with TopologyTestDriver(b.build(), cfg(app), session=spark) as d:
        d.create_input_topic("in", key_type=str, value_type=Payment).pipe_records(records)
        got = d.create_output_topic("out", key_type=str, value_type=Payment).read_key_values()
    assert [(k, v.id) for k, v in got] == expected
