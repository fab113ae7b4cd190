"""Spark's driver-side planning runner of ``transformWithStateInPandas`` unpickles each
stateful operator at every query start; it must not import pandas for that (a third of
the runner's time, docs/performance.md)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark import cloudpickle

import kspark_server
from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark_server.tasks import make_processor


@dataclasses.dataclass
class Payment:
    amount: float


def _specs() -> list[object]:
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/tmp/r"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_versioned("rates", timedelta(hours=2)),
    )
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    s.deduplicate_by_key(timedelta(seconds=5)).left_join(
        rates, lambda p, r: p.amount * (r or 1.0), value_type=float
    ).to(Topic.parquet("o", "/tmp/o"))
    out = compile_topology(b.build(), StreamsConfig(application_id="a", checkpoint_dir="/tmp/c"))
    return [s.spec for s in out.stages() if isinstance(s, st.Stateful)]


@pytest.mark.parametrize("kind", ["dedup", "join"])
def test_the_pickled_operator_unpickles_without_pandas(kind: str, tmp_path: Path) -> None:
    dedup, join = _specs()
    processor = make_processor(dedup if kind == "dedup" else join)  # type: ignore[arg-type]
    # as StreamsApp ships it: kspark_server and the user's module by value
    # (kspark.runtime.shipping)
    shipped = [kspark_server, sys.modules[__name__]]
    for m in shipped:
        cloudpickle.register_pickle_by_value(m)
    try:
        blob = cloudpickle.dumps(processor)
    finally:
        for m in shipped:
            cloudpickle.unregister_pickle_by_value(m)
    path = tmp_path / "op.pkl"
    path.write_bytes(blob)
    # a process like the runner's: pyspark's worker module, and no kspark_server to import
    code = (
        "import pickle, sys\n"
        "import pyspark.sql.streaming.transform_with_state_driver_worker\n"
        "sys.modules['kspark_server'] = None\n"
        f"op = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        "print(type(op).__name__, 'pandas' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    name = "DedupProcessor" if kind == "dedup" else "JoinProcessor"
    assert done.stdout.split() == [name, "False"]
