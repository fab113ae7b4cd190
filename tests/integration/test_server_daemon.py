"""The embedded server's Python workers fork from kspark's daemon where they can run it
(docs/design/server-settings.md): they start with pandas, pyarrow, pyspark's worker and
kspark's operators imported, and the stateful operators run in them.

The session's test server cannot use that daemon (its workers cannot import
``kspark_server``, tests/conftest.py), so this module starts a server of its own, whose
workers import the client's kspark. Only one Spark JVM may run on the test machine:
conftest runs this module before the session's server starts (it uses none of its
fixtures), and stops its server whatever happens.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import kspark
import kspark_server

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def own_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    if request.config.getoption("--spark-remote"):
        pytest.skip("a remote server's workers are its own")
    from kspark.runtime.server import EmbeddedServer

    roots = [os.path.dirname(os.path.dirname(p)) for p in (kspark.__file__, kspark_server.__file__)]
    server = EmbeddedServer(
        conf={"spark.sql.shuffle.partitions": "2"},
        # the client's very kspark: the workers import it, as an installed kspark's do
        env={"PYTHONPATH": os.pathsep.join(dict.fromkeys(roots))},
        home=str(tmp_path_factory.mktemp("kspark-home")),
    ).start()
    session = server.session()
    try:
        yield session
    finally:
        try:
            session.stop()
        finally:
            server.stop()


# with separate executor JVMs too: their daemons start from the settings they get
@pytest.mark.cluster
def test_workers_fork_from_ksparks_daemon_with_the_operators_imported(own_server: Any) -> None:
    # defined here, so that it travels by value
    def _what_the_worker_had(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys

        had = "kspark_server.operators.grouped" in sys.modules
        parent = os.getppid()
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode()
        with open(f"/proc/{parent}/maps") as f:
            maps = f.read()
        for _ in batches:
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "had": had,
                        "daemon": command,
                        "arrow": "/pyarrow/libarrow" in maps,
                        "pandas": "/pandas/_libs/" in maps,
                    }
                ]
            )

    schema = "had boolean, daemon string, arrow boolean, pandas boolean"
    (row,) = own_server.range(1).mapInArrow(_what_the_worker_had, schema).collect()
    assert "-m kspark_server.daemon" in row.daemon, row.daemon
    assert row.arrow and row.pandas
    # a mapInArrow worker does not import kspark's operators: the daemon did
    assert row.had


@pytest.mark.cluster
def test_a_stateful_app_runs_in_workers_of_ksparks_daemon(own_server: Any) -> None:
    from kspark import StreamsBuilder, StreamsConfig
    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    (
        b.stream("in", key_type=str, value_type=int)
        .deduplicate_by_key(timedelta(minutes=1))
        .group_by_key()
        .count()
        .to_stream()
        .to("out")
    )
    config = StreamsConfig(application_id=f"t-{uuid.uuid4().hex[:10]}")
    with TopologyTestDriver(b.build(), config, session=own_server, engine="spark") as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        sink = d.create_output_topic("out", key_type=str, value_type=int)
        for k, v in [("a", 1), ("b", 2), ("a", 3)]:
            src.pipe_input(k, v)
        d.process()
        assert sorted(sink.read_key_values()) == [("a", 1), ("b", 1)]
