"""Which form a stateless chain takes on Spark, and that both forms give the same records,
dead letters and counts (docs/performance.md, "Session 10")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler.compiler import compile_topology
from kspark.compiler.lower import build_dataframe
from kspark.errors import DeadLetterQueueProcessingExceptionHandler
from kspark.testing import TopologyTestDriver
from kspark_server import chain

pytestmark = pytest.mark.spark


def _topology(path: str = "/unused") -> StreamsBuilder:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", path), key_type=str, value_type=int)
    s.filter(lambda k, v: v != 7).map_values(lambda v: 100 // v, value_type=int).to(
        Topic.jsonl("out", "/unused")
    )
    s.flat_map_values(lambda v: [v, v], value_type=int).to(Topic.jsonl("two", "/unused"))
    return b


def test_a_chain_without_fan_out_is_a_scalar_arrow_udf(spark: Any, tmp_path: Any) -> None:
    b = _topology(str(tmp_path))
    output = compile_topology(b.build(), StreamsConfig(application_id="plan"))
    plan = build_dataframe(output, spark)._explain_string(extended=False)
    # the map's chain is one Arrow UDF, run once; the flat map's a mapInArrow
    assert plan.count("ArrowEvalPython") == 1
    assert plan.count("MapInArrow") == 1


def _run(spark: Any, app_id: str) -> tuple[Any, ...]:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler(),
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    with TopologyTestDriver(_topology().build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_records([(f"k{v}", v, 1000 + v) for v in [5, 0, 7, 4, 0, 1]])
        out = d.create_output_topic("out", key_type=str, value_type=int).read_records()
        two = d.create_output_topic("two", key_type=str, value_type=int).read_key_values()
        dead = d.dead_letter_topic().read_raw()
        letters = sorted((json.loads(r["key"]), r["offset"], r["processor_node_id"]) for r in dead)
        m = d.metrics()
        return (
            sorted((r.key, r.value, r.timestamp, r.headers) for r in out),
            sorted(two),
            letters,
            m.dead_letter_records,
            m.input_records,
        )


def test_the_udf_and_the_map_in_arrow_chain_agree(
    spark: Any, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    udf = _run(spark, app_id)
    assert udf[0] == [("k1", 100, 1001, ()), ("k4", 25, 1004, ()), ("k5", 20, 1005, ())]
    assert [x[:2] for x in udf[2]] == [("k0", 1), ("k0", 4)] and udf[3] == 2
    monkeypatch.setattr(chain, "udf_outputs", lambda spec: None)  # every chain a mapInArrow
    assert _run(spark, app_id + "-m") == udf
