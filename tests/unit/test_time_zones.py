"""A naive datetime is UTC wherever it becomes epoch milliseconds, whatever the process's
local time zone (no Spark)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kspark.plan.types import describe_type
from kspark.testing.driver import TestInputTopic
from kspark_server.kafka_sink import _timestamp_ms
from kspark_server.transport import arrow_schema

NAIVE = datetime(2024, 7, 1, 12, 30, 0, 123000)
UTC_MS = int(datetime(2024, 7, 1, 12, 30, 0, 123000, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture(params=["America/New_York", "Asia/Kolkata", "Pacific/Chatham"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The process's local zone set to one far from UTC (with a half-hour or 45-minute
    offset for two of them), as on a server in another region."""
    if not hasattr(time, "tzset"):
        pytest.skip("no time.tzset on this platform")
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    try:
        assert datetime(2024, 7, 1).astimezone().utcoffset() != timedelta(0)
        yield request.param
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_the_kafka_sink_takes_a_naive_datetime_as_utc(local_zone: str) -> None:
    assert _timestamp_ms(NAIVE) == UTC_MS


def test_the_kafka_sink_keeps_an_aware_datetimes_instant(local_zone: str) -> None:
    plus_two = datetime(2024, 7, 1, 14, 30, 0, 123000, tzinfo=timezone(timedelta(hours=2)))
    assert _timestamp_ms(plus_two) == UTC_MS
    assert _timestamp_ms(UTC_MS) == UTC_MS


def test_a_chain_writes_a_naive_datetime_as_utc(local_zone: str) -> None:
    # a fused chain's output columns take the Arrow types of kspark_server.transport.arrow_schema
    schema = arrow_schema(
        '{"type": "struct", "fields": [{"name": "ts", "type": "timestamp",'
        ' "nullable": true, "metadata": {}}]}'
    )
    column = pa.array([NAIVE], type=schema.field("ts").type)
    assert column.cast(pa.int64()).to_pylist() == [UTC_MS * 1000]


@dataclasses.dataclass
class Reading:
    sensor: str
    at: datetime


class _FakeDriver:
    """What a test input topic asks of its driver, with no Spark session."""

    def __init__(self, root: str) -> None:
        self._workdir = root

    def _topic_path(self, name: str) -> str:
        return os.path.join(self._workdir, name)

    def _next_seq(self) -> int:
        return 1


def test_the_test_driver_writes_a_naive_datetime_as_utc(
    local_zone: str, tmp_path: pathlib.Path
) -> None:
    topic: TestInputTopic[str, Reading] = TestInputTopic(
        _FakeDriver(str(tmp_path)),  # type: ignore[arg-type]
        "readings",
        describe_type(str),
        describe_type(Reading),
    )
    topic.pipe_input("s1", Reading("s1", NAIVE), timestamp=0)
    topic._flush()
    table = pq.read_table(tmp_path / "readings")
    at = table.column("value").combine_chunks().field("at")
    assert at.cast(pa.int64()).to_pylist() == [UTC_MS * 1000]


def test_an_operators_output_types_a_timestamp_field_as_utc() -> None:
    # a stateful operator's output record with a datetime field: the operator's Arrow
    # schema must carry the zone (pyspark refuses a timestamp without one), as the chain's
    from kspark_server.transport import operator_arrow_schema

    value = describe_type(Reading).spark_json()
    output = (
        '{"type": "struct", "fields": ['
        '{"name": "key", "type": "string", "nullable": true, "metadata": {}},'
        f' {{"name": "value", "type": {json.dumps(value)}, "nullable": true, "metadata": {{}}}}]}}'
    )
    schema = operator_arrow_schema(output, packed_out=False)
    assert schema is not None
    assert schema.field("value").type.field("at").type == pa.timestamp("us", tz="UTC")
