"""Kafka in and out through kspark's Python Kafka source and sink, against a real
Kafka-protocol broker (tansu) on loopback: dedup -> temporal join -> Kafka sink, the
record envelope, deserialization handling, and exactly-once reads across a restart.

The poison-pill test runs in the main pass: Kafka in and out on the test server, whose
workers cannot import ``kspark_server``, proves that the Python data source, its readers
and its writers reach the server's processes with the code they need. The others are
extended tests."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import (
    DeadLetterQueueProductionExceptionHandler,
    LogAndContinueDeserializationExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    StreamsAppError,
)

pytestmark = pytest.mark.spark

pytest.importorskip("confluent_kafka")
from support.broker import (  # noqa: E402
    Broker,
    BrokerUnavailable,
    consume_all,
    create_topic,
    produce,
    start_broker,
)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    try:
        b = start_broker()
    except BrokerUnavailable as exc:
        pytest.skip(f"no Kafka-protocol broker: {exc}")
    try:
        yield b
    finally:
        b.stop()


@dataclasses.dataclass
class Payment:
    id: str
    amount: float
    currency: str


@dataclasses.dataclass
class Rate:
    rate: float


def convert(p: Payment, r: Rate | None) -> str:
    return f"{p.id}:{p.amount * r.rate if r is not None else None}"


def _j(x: dict[str, Any]) -> bytes:
    return json.dumps(x).encode()


def topology(bootstrap: str, names: dict[str, str]) -> Any:
    sink_opts = {"kafka.batch.num.messages": "1"}
    b = StreamsBuilder()
    rates = b.table(
        Topic.kafka(names["rates"], bootstrap_servers=bootstrap, startingOffsets="earliest"),
        key_type=str,
        value_type=Rate,
        materialized=Materialized.as_versioned("rates", timedelta(days=1)),
    )
    (
        b.stream(
            Topic.kafka(names["payments"], bootstrap_servers=bootstrap, startingOffsets="earliest"),
            key_type=str,
            value_type=Payment,
        )
        .deduplicate_by_key_value(lambda k, p: p.id, timedelta(minutes=10))
        .left_join(rates, convert, value_type=str)
        .to(Topic.kafka(names["out"], bootstrap_servers=bootstrap, **sink_opts))
    )
    return b.build()


@pytest.mark.extended
def test_dedup_temporal_join_to_kafka_and_restart(
    spark: Any, broker: Broker, tmp_path: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    names = {k: f"{k}-{suffix}" for k in ("payments", "rates", "out")}
    for t in names.values():
        create_topic(broker.bootstrap, t, partitions=2)
    produce(
        broker.bootstrap,
        names["rates"],
        [
            (b"EUR", _j({"rate": 1.0}), None, None, 1_000),
            (b"EUR", _j({"rate": 2.0}), None, None, 5_000),
        ],
    )
    produce(
        broker.bootstrap,
        names["payments"],
        [
            (
                b"EUR",
                _j({"id": "p1", "amount": 10.0, "currency": "EUR"}),
                [("trace", b"t1")],
                None,
                2_000,
            ),
            (
                b"EUR",
                _j({"id": "p1", "amount": 10.0, "currency": "EUR"}),
                None,
                None,
                2_500,
            ),  # duplicate
            (b"EUR", _j({"id": "p2", "amount": 10.0, "currency": "EUR"}), None, None, 6_000),
            (b"USD", _j({"id": "p3", "amount": 5.0, "currency": "USD"}), None, None, 6_000),
        ],
    )
    cfg = StreamsConfig(
        application_id=f"kafka-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=2,
    )
    StreamsApp(topology(broker.bootstrap, names), cfg, session=spark).run_until_caught_up()
    out = consume_all(broker.bootstrap, names["out"])
    by_value = {r["value"].decode(): r for r in out}
    assert sorted(by_value) == ["p1:10.0", "p2:20.0", "p3:None"]
    p1 = by_value["p1:10.0"]
    assert p1["key"] == b"EUR"
    assert p1["timestamp"] == 2_000  # the input record's timestamp travels to the output
    assert [(k, v) for k, v in p1["headers"] or []] == [("trace", b"t1")]

    # a restart from the checkpoint reads only what is new, and keeps the dedup store
    produce(
        broker.bootstrap,
        names["payments"],
        [
            (b"EUR", _j({"id": "p2", "amount": 10.0, "currency": "EUR"}), None, None, 6_100),  # dup
            (
                b"EUR",
                _j({"id": "p4", "amount": 1.0, "currency": "EUR"}),
                None,
                None,
                1_500,
            ),  # late: as of 1500
        ],
    )
    StreamsApp(topology(broker.bootstrap, names), cfg, session=spark).run_until_caught_up()
    values = sorted(r["value"].decode() for r in consume_all(broker.bootstrap, names["out"]))
    assert values == ["p1:10.0", "p2:20.0", "p3:None", "p4:1.0"]


@pytest.mark.extended
def test_bad_kafka_records_go_to_the_deserialization_handler(
    spark: Any, broker: Broker, tmp_path: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    src, out = f"in-{suffix}", f"out-{suffix}"
    create_topic(broker.bootstrap, src, partitions=1)
    create_topic(broker.bootstrap, out, partitions=1)
    produce(
        broker.bootstrap,
        src,
        [
            (b"a", _j({"rate": 1.5}), None, None, 1),
            (b"b", b"{not json", None, None, 2),
            (b"c", _j({"rate": 2.5}), None, None, 3),
        ],
    )
    b = StreamsBuilder()
    b.stream(
        Topic.kafka(src, bootstrap_servers=broker.bootstrap, startingOffsets="earliest"),
        key_type=str,
        value_type=Rate,
    ).map_values(lambda r: r.rate * 2, value_type=float).to(
        Topic.kafka(out, bootstrap_servers=broker.bootstrap, **{"kafka.batch.num.messages": "1"})
    )
    cfg = StreamsConfig(
        application_id=f"kbad-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=1,
        deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
        kafka_client="python",
    )
    app = StreamsApp(b.build(), cfg, session=spark)
    app.run_until_caught_up()
    got = sorted((r["key"], r["value"]) for r in consume_all(broker.bootstrap, out))
    assert got == [(b"a", b"3.0"), (b"c", b"5.0")]
    assert sum(app.metrics().dropped_by_processor().values()) == 1


@pytest.mark.extended
def test_names_bound_by_bootstrap_servers_carry_dynamic_values(
    spark: Any, broker: Broker, tmp_path: Any
) -> None:
    """A topology with names only and no types, bound to Kafka by ``bootstrap_servers``:
    keys and values are read as JSON text (a key that is not JSON as its text), and
    written as JSON text."""
    suffix = uuid.uuid4().hex[:6]
    src, out = f"dyn-in-{suffix}", f"dyn-out-{suffix}"
    create_topic(broker.bootstrap, src, partitions=1)
    create_topic(broker.bootstrap, out, partitions=1)
    produce(
        broker.bootstrap,
        src,
        [
            (b"a", _j({"n": 1, "tags": ["x"]}), None, None, 1),
            (b"b", _j({"n": 0, "tags": []}), None, None, 2),
            (b"c", _j({"n": 4, "tags": ["y", "z"]}), None, None, 3),
        ],
    )
    b = StreamsBuilder()
    (
        b.stream(src)
        .filter(lambda k, v: v["n"] > 0)
        .map_values(lambda k, v: {"key": k, "n": v["n"] * 2, "tags": len(v["tags"])})
        .to(out)
    )
    cfg = StreamsConfig(
        application_id=f"kdyn-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=1,
        bootstrap_servers=broker.bootstrap,
    )
    StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()
    got = sorted(
        (json.loads(r["key"]), json.loads(r["value"])) for r in consume_all(broker.bootstrap, out)
    )
    assert got == [("a", {"key": "a", "n": 2, "tags": 1}), ("c", {"key": "c", "n": 8, "tags": 2})]


def test_kafka_poison_pills_reach_their_handlers(spark: Any, broker: Broker, tmp_path: Any) -> None:
    # invalid UTF-8 in a str key or value: the deserialization handler, not a changed
    # value; a timestamp beyond year 9999: an invalid timestamp, not an OverflowError
    suffix = uuid.uuid4().hex[:6]
    src, out = f"pin-{suffix}", f"pout-{suffix}"
    create_topic(broker.bootstrap, src, partitions=1)
    create_topic(broker.bootstrap, out, partitions=1)
    produce(
        broker.bootstrap,
        src,
        [
            (b"a", b"ok-1", None, None, 1),
            (b"\xff\xfe", b"bad-key", None, None, 2),
            (b"c", b"bad-\xc3(value", None, None, 3),
            (b"d", b"far-future", None, None, 2**62),
            (b"e", b"ok-5", None, None, 5),
        ],
    )
    b = StreamsBuilder()
    b.stream(
        Topic.kafka(src, bootstrap_servers=broker.bootstrap, startingOffsets="earliest"),
        key_type=str,
        value_type=str,
    ).map_values(lambda v: v.upper(), value_type=str).to(
        Topic.kafka(out, bootstrap_servers=broker.bootstrap, **{"kafka.batch.num.messages": "1"})
    )
    cfg = StreamsConfig(
        application_id=f"kpoison-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=1,
        deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
        timestamp_policy="skip",
        kafka_client="python",
    )
    app = StreamsApp(b.build(), cfg, session=spark)
    app.run_until_caught_up()
    got = sorted((r["key"], r["value"]) for r in consume_all(broker.bootstrap, out))
    assert got == [(b"a", b"OK-1"), (b"e", b"OK-5")]
    reasons = {r: n for (_, r), n in app.metrics().dropped_by_reason().items()}
    assert reasons == {"deserialization-error": 2, "invalid-timestamp": 1}


@pytest.mark.extended
@pytest.mark.parametrize("mode", ["continue", "fail", "dead-letter", "dead-letter too large"])
def test_a_record_over_the_sinks_size_limit_goes_to_the_production_handler(
    spark: Any, broker: Broker, tmp_path: Any, mode: str
) -> None:
    # the producer's limit is set low so that the test stays cheap; the chain that feeds
    # the sink measures each record against it (kspark_server.recordsize)
    suffix = uuid.uuid4().hex[:6]
    src, out, dlq = f"szin-{suffix}", f"szout-{suffix}", f"szdlq-{suffix}"
    for t in (src, out, dlq):
        create_topic(broker.bootstrap, t, partitions=1)
    big = "x" * 5000
    produce(
        broker.bootstrap,
        src,
        [
            (b"a", b"small", None, None, 1),
            (b"b", big.encode(), None, None, 2),
            (b"c", b"also small", None, None, 3),
        ],
    )
    small = {"kafka.message.max.bytes": "2048", "kafka.batch.num.messages": "1"}
    b = StreamsBuilder()
    b.stream(
        Topic.kafka(src, bootstrap_servers=broker.bootstrap, startingOffsets="earliest"),
        key_type=str,
        value_type=str,
    ).to(Topic.kafka(out, bootstrap_servers=broker.bootstrap, **small))
    handlers: dict[str, Any] = {}
    if mode == "continue":
        handlers["production_exception_handler"] = LogAndContinueProductionExceptionHandler
    elif mode.startswith("dead-letter"):
        handlers["production_exception_handler"] = DeadLetterQueueProductionExceptionHandler
        limit = small if mode == "dead-letter too large" else {}
        handlers["dead_letter_queue_topic"] = Topic.kafka(
            dlq, bootstrap_servers=broker.bootstrap, **limit
        )
    cfg = StreamsConfig(
        application_id=f"ksize-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=1,
        kafka_client="python",
        **handlers,
    )
    app = StreamsApp(b.build(), cfg, session=spark)
    sink = "KSTREAM-SINK-0000000001"
    if mode in ("fail", "dead-letter too large"):
        with pytest.raises(StreamsAppError) as info:
            app.run_until_caught_up()
        text = str(info.value)
        if mode == "fail":
            assert sink in text and f"Kafka topic '{out}'" in text and "2048-byte limit" in text
            assert "kafka.message.max.bytes" in text
        else:  # the dead letter itself is over its topic's limit: one clear error, no loop
            assert "dead-letter record" in text and dlq in text
            assert "message.max.bytes=2048" in text
        return
    app.run_until_caught_up()
    got = [(r["key"], r["value"]) for r in consume_all(broker.bootstrap, out)]
    assert got == [(b"a", b"small"), (b"c", b"also small")]
    if mode == "continue":
        assert app.metrics().dropped_by_reason() == {(sink, "production-error"): 1}
    else:
        (dead,) = consume_all(broker.bootstrap, dlq)
        assert json.loads(dead["value"]) == big  # dead letters keep values as JSON text
        headers = dict(dead["headers"])
        assert headers["__streams.errors.processor.node.id"] == sink.encode()
        assert b"2048-byte limit" in headers["__streams.errors.message"]
        assert app.metrics().dead_letter_records == 1


@pytest.mark.extended
def test_a_topic_pattern_and_a_topic_name_extractor_on_kafka(
    spark: Any, broker: Broker, tmp_path: Any
) -> None:
    """``stream(re.compile(...))`` reads every matching topic (a later one too, from its
    start), and ``to(extractor)`` writes each record to the Kafka topic it names."""
    suffix = uuid.uuid4().hex[:6]
    eu, us, other = f"pat-{suffix}-eu", f"pat-{suffix}-us", f"nopat-{suffix}-eu"
    for t in (eu, us, other, f"copy-{eu}", f"copy-{us}", f"copy-pat-{suffix}-asia"):
        create_topic(broker.bootstrap, t, partitions=1)
    produce(broker.bootstrap, eu, [(b"a", b"1", None, None, 1)])
    produce(broker.bootstrap, us, [(b"b", b"2", None, None, 2)])
    produce(broker.bootstrap, other, [(b"z", b"9", None, None, 3)])
    b = StreamsBuilder()
    b.stream(re.compile(f"pat-{suffix}-.*"), key_type=str, value_type=int).to(
        lambda k, v, ctx: f"copy-{ctx.topic}"
    )
    cfg = StreamsConfig(
        application_id=f"kpat-{suffix}",
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=1,
        bootstrap_servers=broker.bootstrap,
    )
    StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()
    assert [r["key"] for r in consume_all(broker.bootstrap, f"copy-{eu}")] == [b"a"]
    assert [r["key"] for r in consume_all(broker.bootstrap, f"copy-{us}")] == [b"b"]
    # a topic that comes to match later is read from its first record
    asia = f"pat-{suffix}-asia"
    create_topic(broker.bootstrap, asia, partitions=1)
    produce(broker.bootstrap, asia, [(b"c", b"3", None, None, 4)])
    StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()
    assert [r["key"] for r in consume_all(broker.bootstrap, f"copy-{asia}")] == [b"c"]
    assert [r["key"] for r in consume_all(broker.bootstrap, f"copy-{eu}")] == [b"a"]
