"""The order of the rows in a batch folder: a stateful operator's output in the order its
task processed the records (Kafka Streams' timestamp merge of the task's input
partitions), batch by batch and across a restart (kspark_server.sinks.write_topic)."""

from __future__ import annotations

import glob
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic

pytestmark = pytest.mark.spark


def _write(folder: str, name: str, rows: list[tuple[str, int, int, int]]) -> None:
    """Envelope rows ``(key, timestamp, partition, offset)``, the timestamp as the value."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        for key, ts, partition, offset in rows:
            row = {"key": key, "value": ts, "timestamp": ts, "partition": partition}
            f.write(json.dumps({**row, "offset": offset}) + "\n")
    os.replace(tmp, os.path.join(folder, name))


def _batch_values(out: str) -> list[list[int]]:
    """Each batch folder's values, batch by batch, each file's lines in file order."""
    batches = []
    folders = glob.glob(os.path.join(out, "batch_id=*"))
    for folder in sorted(folders, key=lambda f: int(f.rsplit("=", 1)[1])):
        values: list[int] = []
        for name in sorted(glob.glob(os.path.join(folder, "part-*"))):
            with open(name) as f:
                values += [json.loads(line)["value"] for line in f if line.strip()]
        batches.append(values)
    return batches


def test_a_stateful_operators_output_is_written_in_processing_order(
    spark: Any, app_id: str
) -> None:
    """One task reads two input partitions whose offsets run the other way round from
    their timestamps: the task takes the records by timestamp, and each batch's file keeps
    that order (sorting by source position would put partition 0's offsets first)."""
    with tempfile.TemporaryDirectory() as base:
        inp, out = os.path.join(base, "in"), os.path.join(base, "out")
        b = StreamsBuilder()
        b.stream(Topic.jsonl("in", inp), key_type=str, value_type=int).deduplicate_by_key(
            timedelta(hours=1)
        ).to(Topic.jsonl("out", out))
        topo = b.build()
        cfg = StreamsConfig(
            application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=1
        )
        # (key, timestamp, partition, offset); "c" again is a duplicate
        _write(inp, "a.jsonl", [("a", 30, 0, 0), ("b", 40, 0, 1), ("c", 10, 1, 5), ("d", 20, 1, 6)])
        StreamsApp(topo, cfg, session=spark).run_until_caught_up(progress=False)
        assert _batch_values(out) == [[10, 20, 30, 40]]
        # a restart goes on in the same order, in a batch of its own
        _write(inp, "b.jsonl", [("e", 70, 0, 2), ("f", 50, 1, 7), ("c", 55, 1, 8), ("g", 60, 1, 9)])
        StreamsApp(topo, cfg, session=spark).run_until_caught_up(progress=False)
        assert _batch_values(out) == [[10, 20, 30, 40], [50, 60, 70]]
