"""What the embedded server does to keep fixed costs down (docs/design/server-settings.md):
its Python workers import pyspark and py4j with their cached bytecode, not from
``pyspark.zip`` and py4j's zip, which Python compiles again in every process; its
checkpoint files are renamed without forking the JVM."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.spark


# with separate executor JVMs too: their workers get SPARK_HOME from the worker JVM
@pytest.mark.cluster
def test_workers_import_pyspark_from_site_packages(spark: Any, spark_server: Any) -> None:
    if spark_server is None:
        pytest.skip("a remote server's workers are its own")

    # defined here, so that it travels by value: the test server's workers cannot import
    # the tests' modules
    def _where_pyspark_is(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import py4j
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"path": pyspark.__file__, "py4j": py4j.__file__}])

    (row,) = spark.range(1).mapInArrow(_where_pyspark_is, "path string, py4j string").collect()
    assert ".zip" not in row.path, row.path
    assert row.path.endswith("/pyspark/__init__.py")
    # py4j too, which pyspark imports in every worker
    assert ".zip" not in row.py4j, row.py4j
    assert row.py4j.endswith("/py4j/__init__.py")


def test_checkpoint_files_are_renamed_without_a_child_process(
    spark: Any, spark_server: Any
) -> None:
    if spark_server is None:
        pytest.skip("a remote server's settings are its own")
    # Hadoop's FileContext renames on the local file system by running `readlink` in a
    # child process of the server's JVM (no native Hadoop library in pip's pyspark)
    manager = spark.conf.get("spark.sql.streaming.checkpointFileManagerClass")
    assert manager.endswith(".FileSystemBasedCheckpointFileManager"), manager


def _dedup_count(events: Any) -> Any:
    """Two stateful operators: deduplication, then a count per key."""
    return (
        events.deduplicate_by_key(timedelta(minutes=1))
        .map_values(lambda v: v + 1, value_type=int)
        .group_by_key()
        .count()
        .to_stream()
    )


def test_workers_without_kspark_get_it_in_bundles_and_the_plan_stays_small(
    spark: Any, spark_server: Any, tmp_path: Any
) -> None:
    """The test server's workers cannot import kspark (tests/conftest.py), so the worker
    check finds no ``kspark_server`` there and each Python function of a plan carries the
    bundle of the modules it needs (kspark.compiler.bundle), never a by-value copy of the
    operators' code: a two-operator app's plan stays under 400 kB (by value, every
    function carried its own copy: 3.1 MB). Where the workers have the client's very
    sources (the embedded server outside the tests, which ``./run demo`` runs on), the
    functions name the code by reference. Spark Connect's plan cache keeps every plan a
    session sends."""
    if spark_server is None:
        pytest.skip("a remote server's workers are its own")
    from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
    from kspark.compiler.lowering.build import build_dataframe
    from kspark.runtime import shipping, workers

    (tmp_path / "events").mkdir()
    b = StreamsBuilder()
    events = b.stream(Topic.jsonl("events", str(tmp_path / "events")), key_type=str, value_type=int)
    _dedup_count(events).to(Topic.parquet("out", str(tmp_path / "out")))
    config = StreamsConfig(application_id="plan-size", checkpoint_dir=str(tmp_path / "chk"))
    app = StreamsApp(b.build(), config, session=spark)
    output = app.compiled()
    for topic in app._internal:  # the app's internal topics, read as the app starts
        assert topic.path is not None
        os.makedirs(topic.path, exist_ok=True)
    app._prepare_session(output)
    assert workers.run_probe(spark, []).kspark_server is None
    assert not workers.same_server_code(spark)

    def plan_size() -> int:
        df = build_dataframe(output, spark, checkpoint=str(tmp_path / "chk" / "query"))
        return len(df._plan.to_proto(spark.client).SerializeToString())  # type: ignore[operator]

    in_bundles = plan_size()
    try:
        shipping.server_code(by_reference=True)
        by_reference = plan_size()
    finally:
        shipping.server_code(by_reference=False)
    assert by_reference < 100_000 < in_bundles < 400_000, (by_reference, in_bundles)


def test_an_app_runs_on_workers_that_get_kspark_server_in_bundles(
    spark: Any, spark_server: Any, app_id: str
) -> None:
    """The workers install the bundles each function carries (the blocker keeps their
    own kspark_server out of reach, tests/support/blocker) and run both operators."""
    if spark_server is None:
        pytest.skip("a remote server's workers are its own")
    from kspark import StreamsBuilder, StreamsConfig
    from kspark.compiler import bundle as _bundle
    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    _dedup_count(b.stream("in", key_type=str, value_type=int)).to("out")
    config = StreamsConfig(application_id=app_id)
    with TopologyTestDriver(b.build(), config, session=spark, engine="spark") as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        sink = d.create_output_topic("out", key_type=str, value_type=int)
        for k, v in [("a", 1), ("b", 2), ("a", 3)]:
            src.pipe_input(k, v)
        d.process()
        assert _bundle.by_value()
        assert sorted(sink.read_key_values()) == [("a", 1), ("b", 1)]
