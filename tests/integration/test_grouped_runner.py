"""The stateful operators on Spark: deduplication gives the in-process engine's output
over micro-batch splits, and restarts whose executors' local stores are new (a fresh
``state_dir``) or behind rebuild them from the checkpoint's files."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver
from kspark_server.taskfiles import DIR_NAME

pytestmark = pytest.mark.spark

MODES = ("by_key", "by_key_value", "by_id")


def topology(interval_ms: int, mode: str, src: Any = None, out: Any = None) -> Any:
    b = StreamsBuilder()
    s = b.stream(src or Topic.jsonl("in", "/unused"), key_type=str, value_type=str)
    every = timedelta(milliseconds=interval_ms)
    if mode == "by_key":
        d = s.deduplicate_by_key(every)
    elif mode == "by_key_value":
        d = s.deduplicate_by_key_value(lambda k, v: v.split("-")[0] or None, every)
    else:
        d = s.deduplicate(lambda k, v: v.split("-")[0] or None, every)
    d.to(out or Topic.jsonl("out", "/unused"))
    return b.build()


#: keys, ids and timestamps that repeat within and across batches, out of order
RECORDS = [(f"k{(i * 7) % 5}", f"{'xyz'[i % 3]}-{i}", 1000 * ((i * 13) % 23)) for i in range(36)]
SPLIT = [RECORDS[:10], RECORDS[10:11], RECORDS[11:25], RECORDS[25:]]


def run(spark: Any, app_id: str, mode: str, batches: list[Any]) -> list[str]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2, state_check_log=True)
    with TopologyTestDriver(
        topology(5000, mode), cfg, session=spark, engine="spark" if spark else "local"
    ) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for batch in batches:
            for k, v, ts in batch:
                src.pipe_input(k, v, timestamp=ts)
            d.process()
        return sink.read_values()


@pytest.mark.parametrize("mode", MODES)
def test_split_gives_the_in_process_engines_output(spark: Any, app_id: str, mode: str) -> None:
    """Every deduplication flavour, split in four micro-batches (each a restart of the
    query), against the in-process engine's output, split or in one batch."""
    want = run(None, app_id + "-ref", mode, SPLIT)
    assert want == run(None, app_id + "-one", mode, [RECORDS])
    assert run(spark, app_id, mode, SPLIT) == want


def test_restarts_on_fresh_and_stale_local_stores_rebuild_from_the_files(
    spark: Any, app_id: str
) -> None:
    """Three runs of one app, each a restart: the first and the last on one ``state_dir``
    (whose local stores the middle run leaves behind), the middle one on a fresh
    ``state_dir`` (no local store at all). Each rebuilds from the checkpoint's files and
    the output is a single clean run's."""
    with tempfile.TemporaryDirectory() as base:
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        topo = topology(5000, "by_key", Topic.jsonl("in", src), Topic.jsonl("out", out))

        def start(local: str) -> None:
            cfg = StreamsConfig(
                application_id=app_id,
                checkpoint_dir=os.path.join(base, "chk"),
                num_partitions=2,
                state_dir=os.path.join(base, local),
                state_check_log=True,
            )
            StreamsApp(topo, cfg, session=spark).run_until_caught_up()

        for i, (batch, local) in enumerate(zip(SPLIT[:3], ["a", "b", "a"], strict=True)):
            write_jsonl(src, f"{i}.jsonl", batch)
            start(local)
        files = os.listdir(os.path.join(base, "chk", "query", DIR_NAME))
        assert files, "the operator keeps its state in the checkpoint's files"
        got = jsonl_values(out)
    want = sorted(run(None, app_id + "-ref", "by_key", SPLIT[:3]))
    assert got == want


#: values at the edges of what the operator's output frames carry: empty, null, 1 MiB,
#: bytes that are not UTF-8, headers with null and binary values, the largest timestamp
MIB = b"\xff\xfe" * (1 << 19)
EDGES: list[tuple[bytes, bytes | None, int, tuple[tuple[str, bytes | None], ...]]] = [
    (b"", b"", 0, ()),
    (b"\xff\x00\xfe", None, 1, (("h", b"\xff\xfe"), ("n", None))),
    (b"big", MIB, 253402300799999, (("", b""), ('q"\n', MIB))),
    (b"\xc3\x28", b"\x80", 5, ()),
    (b"", b"again", 6, (("dup", b"\x00"),)),
]


def test_edge_values_leave_the_operator_exactly(spark: Any, app_id: str) -> None:
    """Deduplicated records whose keys, values and headers are edge cases reach the sink
    as the in-process engine gives them, in two micro-batches."""

    def run_edges(session: Any, suffix: str) -> list[Any]:
        b = StreamsBuilder()
        s = b.stream(Topic.jsonl("in", "/unused"), key_type=bytes, value_type=bytes)
        s.deduplicate_by_key(timedelta(seconds=5)).to(Topic.jsonl("out", "/unused"))
        cfg = StreamsConfig(
            application_id=app_id + suffix,
            num_partitions=2,
            state_check_log=True,
        )
        engine = "spark" if session else "local"
        with TopologyTestDriver(b.build(), cfg, session=session, engine=engine) as d:
            src = d.create_input_topic("in", key_type=bytes, value_type=bytes)
            sink = d.create_output_topic("out", key_type=bytes, value_type=bytes)
            for batch in (EDGES[:2], EDGES[2:]):
                for k, v, ts, headers in batch:
                    src.pipe_input(k, v, timestamp=ts, headers=headers)
                d.process()
            return sorted(
                ((r.key, r.value, r.timestamp, r.headers) for r in sink.read_records()),
                key=repr,
            )

    want = run_edges(None, "-ref")
    assert len(want) == len(EDGES)
    assert run_edges(spark, "") == want
