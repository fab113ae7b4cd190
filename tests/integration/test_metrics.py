"""Records-in counts when one source feeds several sinks: each input record counts once
in the run report, the app's metrics and the progress display."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import pytest

from kspark import Branched, Named, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.plan.topology import Topology
from kspark.runtime.display import ProgressTotals
from kspark.runtime.metrics import input_rows, progress_as_dict

pytestmark = pytest.mark.spark

RECORDS = 25


def write_input(base: str) -> None:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    tmp = os.path.join(base, ".a.jsonl")
    with open(tmp, "w") as f:
        for i in range(RECORDS):
            f.write(json.dumps({"key": f"k{i % 4}", "value": i, "timestamp": 1000 + i}) + "\n")
    os.replace(tmp, os.path.join(base, "in", "a.jsonl"))


def two_sinks(base: str) -> Topology:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int)
    s.to(Topic.jsonl("all", os.path.join(base, "all")))
    s.map_values(lambda v: v * 2, value_type=int).to(
        Topic.jsonl("doubled", os.path.join(base, "doubled"))
    )
    return b.build()


def branches(base: str) -> Topology:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int)
    parts = (
        s.split(Named.as_("b-"))
        .branch(lambda k, v: v % 2 == 0, Branched.as_("even"))
        .default_branch(Branched.as_("odd"))
    )
    parts["b-even"].to(Topic.jsonl("even", os.path.join(base, "even")))
    parts["b-odd"].to(Topic.jsonl("odd", os.path.join(base, "odd")))
    return b.build()


@pytest.mark.parametrize("build", [two_sinks, branches], ids=["same-stream", "split"])
def test_one_source_two_sinks_counts_each_record_once(spark: Any, app_id: str, build: Any) -> None:
    with tempfile.TemporaryDirectory() as base:
        write_input(base)
        cfg = StreamsConfig(
            application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2
        )
        app = StreamsApp(build(base), cfg, session=spark)
        report = app.run_until_caught_up(progress=False)
        assert report.input_records == RECORDS
        assert app.metrics().input_records == RECORDS
        # the progress display and `kspark status` count the same way, from the query's
        # progress as Spark reports it (which counts the source once per sink)
        raw = [progress_as_dict(p) for p in app.query.recentProgress]
        assert sum(input_rows(p) for p in raw) == RECORDS
        totals = ProgressTotals()
        for p in raw:
            totals.add(p)
        assert totals.records_in == RECORDS
        assert report.output_records == (2 * RECORDS if build is two_sinks else RECORDS)
