"""The per-session answer to "has this server Spark's Kafka connector?" (no Spark)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from pyspark.errors import AnalysisException

from kspark.compiler.lowering import kafka


class _Reader:
    def __init__(self, has_kafka: bool, error: Exception | None = None) -> None:
        self.has_kafka = has_kafka
        self.error = error

    def format(self, name: str) -> _Reader:
        return self

    def option(self, key: str, value: str) -> _Reader:
        return self

    def load(self) -> _Reader:
        if self.error is not None:
            raise self.error
        if not self.has_kafka:
            raise RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: kafka")
        return self

    @property
    def schema(self) -> str:
        return "key binary, value binary"


class _DataSources:
    def register(self, source: type) -> None:
        pass


class FakeSession:
    """Just what ``kafka_format`` calls on a session. It holds no other object, so that
    the memory of a freed one goes to the next one (see below)."""

    def __init__(self, has_kafka: bool, error: Exception | None = None) -> None:
        self.has_kafka = has_kafka
        self.error = error

    @property
    def read(self) -> _Reader:
        return _Reader(self.has_kafka, self.error)

    @property
    def dataSource(self) -> _DataSources:
        return _DataSources()


def _fmt(session: Any) -> str:
    return kafka.kafka_format(session, "auto")


def test_a_new_session_does_not_get_an_old_sessions_answer() -> None:
    old = FakeSession(has_kafka=False)
    assert _fmt(old) == "kspark_kafka"
    old_id = id(old)
    del old
    gc.collect()
    # CPython hands a freed object's memory (so its id()) to the next object of its size:
    # look for a new session that reuses the old one's id, as a cache keyed by id() saw
    sessions = [FakeSession(has_kafka=True) for _ in range(1000)]
    reused = [s for s in sessions if id(s) == old_id]
    for session in reused or sessions[:1]:
        assert _fmt(session) == "kafka"


def test_the_answer_goes_with_its_session() -> None:
    session = FakeSession(has_kafka=True)
    assert _fmt(session) == "kafka"
    assert session in kafka.JVM_KAFKA
    before = len(kafka.JVM_KAFKA)
    del session
    gc.collect()
    assert len(kafka.JVM_KAFKA) == before - 1


def test_one_probe_per_session() -> None:
    session = FakeSession(has_kafka=True)
    assert _fmt(session) == "kafka"
    session.has_kafka = False  # a second probe would now answer otherwise
    assert _fmt(session) == "kafka"


def test_spark_s_condition_decides_whether_the_connector_is_missing() -> None:
    # Spark's condition for a server without the connector, whatever its message's wording
    for condition in ("KAFKA_DATA_SOURCE_NOT_ENABLED", "DATA_SOURCE_NOT_FOUND"):
        missing = AnalysisException(
            message="no such source: kafka", errorClass=condition, messageParameters={}
        )
        assert _fmt(FakeSession(has_kafka=True, error=missing)) == "kspark_kafka"
    # another condition is another failure, even if its message reads like a missing source
    other = AnalysisException(
        message="[PATH_NOT_FOUND] could not find kafka's path",
        errorClass="PATH_NOT_FOUND",
        messageParameters={},
    )
    with pytest.raises(AnalysisException):
        _fmt(FakeSession(has_kafka=True, error=other))
