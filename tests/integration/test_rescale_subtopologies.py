"""Rescaling an app of several stateful operators on Spark: two chained counts, rescaled stopped (while the second has records of the first
in its internal topic that it has not read yet, while input files arrive with the app
stopped, and after a micro-batch that wrote its internal topic and failed before it
committed) and running (warm, with files arriving at every step). The second count's
updates come out exactly once each, as one clean run gives them: nothing read twice,
nothing lost."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest
from support.jsonlfiles import write_jsonl

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import StreamsAppError

pytestmark = pytest.mark.spark

LETTERS = "abcde"


def topology(src: str, out: str) -> Any:
    """Records per key, then those counts summed per first letter (a re-grouped table,
    whose changes subtract a key's old count and add its new one): the second aggregation
    reads the first's changes from an internal topic, a micro-batch later, and a change
    read twice or lost leaves a wrong total."""
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", src), key_type=str, value_type=str)
        .group_by_key()
        .count(materialized=Materialized.as_("per-key"))
        .group_by(lambda k, c: (k[:1], c), key_type=str, value_type=int)
        .reduce(lambda a, b: a + b, lambda a, b: a - b, materialized=Materialized.as_("per-letter"))
        .to_stream()
        .to(Topic.jsonl("out", out))
    )
    return b.build()


class Feeder:
    """One input file per call; ``per_letter`` counts the records of each first letter."""

    def __init__(self, folder: str) -> None:
        self.folder, self.n = folder, itertools.count()
        self.per_letter: Counter[str] = Counter()

    def __call__(self) -> None:
        n = next(self.n)
        rows = [(f"{LETTERS[i % 5]}{i % 7}", f"v{n}-{i}", n * 1000 + i) for i in range(23 + n)]
        self.per_letter.update(k[:1] for k, _, _ in rows)
        write_jsonl(self.folder, f"{n:04d}.jsonl", rows)


def totals(out: str) -> dict[str, int]:
    """Each letter's last total as the sink wrote it (batch folders in batch order)."""
    got: dict[str, int] = {}
    folders = sorted(
        (int(name.removeprefix("batch_id=")), name)
        for name in os.listdir(out)
        if name.startswith("batch_id=")
    )
    for _, name in folders:
        for root, _, files in os.walk(os.path.join(out, name)):
            for f in sorted(files):
                if f.startswith((".", "_")) or f.endswith(".crc"):
                    continue
                with open(os.path.join(root, f)) as lines:
                    for line in lines:
                        if line.strip():
                            r = json.loads(line)
                            got[r["key"]] = int(r["value"])
    return got


def exact(feed: Feeder) -> dict[str, int]:
    """What one clean run gives: each letter's records, each counted once."""
    return dict(feed.per_letter)


def config(app_id: str, base: str, partitions: int) -> StreamsConfig:
    return StreamsConfig(
        application_id=app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        num_partitions=partitions,
        state_dir=os.path.join(base, "local"),
    )


def test_chained_counts_rescaled_stopped_count_each_record_once(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        feed = Feeder(src)
        app = StreamsApp(topology(src, out), config(app_id, base, 2), session=spark)
        feed()
        feed()
        app.run_until_caught_up(progress=False)
        assert totals(out) == exact(feed)
        # one availableNow round: the first count reads the new file and writes its
        # updates to the internal topic, which the second count has not read yet
        feed()
        app._run_available(None, False)
        pending = exact(feed)
        assert totals(out) != pending
        feed()  # written while the app is stopped
        report = app.rescale(3, progress=False)
        assert not report.warm and report.to_partitions == 3
        moved = {s.store: s for s in report.stores}
        assert {"per-key", "per-letter"} <= set(moved)
        assert all(s.entries_before == s.entries_after > 0 for s in moved.values())
        feed()
        app.run_until_caught_up(progress=False)
        assert totals(out) == exact(feed)

        # a micro-batch that writes the internal topic and fails before it commits: its
        # folder is the output of no committed batch, and the rescale drops it
        feed()
        app._run_available(None, False)  # the first count's batch, committed
        output = app.compiled()
        failing = app.generation.batch_offset + _last_batch(app) + 1
        app._output = attrs.evolve(
            output,
            writer_spec=dataclasses.replace(output.writer_spec, fail_after_internal=failing),
        )
        feed()
        with pytest.raises(StreamsAppError, match="injected fault"):
            app.run_until_caught_up(progress=False)
        app.rescale(1, progress=False)
        feed()
        app.run_until_caught_up(progress=False)
        assert totals(out) == exact(feed)


def _last_batch(app: StreamsApp) -> int:
    from kspark.runtime.checkpoints import last_committed

    batch = last_committed(app.session, app.checkpoint_location)
    assert batch is not None
    return batch


class Phases:
    """A progress reporter that calls ``on_phase(text)`` at each step of the rescale."""

    def __init__(self, on_phase: Callable[[str], None]) -> None:
        self.on_phase = on_phase

    def update(self, progress: Mapping[str, Any]) -> None:
        pass

    def phase(self, text: str | None) -> None:
        if text:
            self.on_phase(text)

    def close(self, summary: str | None = None) -> None:
        pass


def test_chained_counts_rescaled_warm_count_each_record_once(
    spark: Any, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the two counts share the query's one applyInPandasWithState: each build and
    # catch-up round reads its committed group states once for both stores, not once per
    # store (each read scans the operator's whole state)
    from kspark.runtime import regroup

    scans: list[tuple[Any, Any]] = []
    read = regroup._olds

    def counted(*args: Any) -> Any:
        scans.append((args[2], args[3]))  # (operator, batch)
        return read(*args)

    monkeypatch.setattr(regroup, "_olds", counted)
    with tempfile.TemporaryDirectory() as base:
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        feed = Feeder(src)
        app = StreamsApp(topology(src, out), config(app_id, base, 2), session=spark)
        feed()
        feed()
        app.start()
        try:
            app.query.processAllAvailable()

            def during(text: str) -> None:
                # a file at every step: the build's and the catch-ups' go through the old
                # layout (and its internal topic) while the rescale goes on
                feed()
                if text != "switching":
                    app.query.processAllAvailable()

            report = app.rescale(3, progress=Phases(during))
            assert report.warm and report.to_partitions == 3 and report.rounds >= 1
            assert {"per-key", "per-letter"} <= {s.store for s in report.stores}
            assert scans and len(scans) == len(set(scans)), scans
            feed()
            app.query.processAllAvailable()
        finally:
            app.stop()
        app.run_until_caught_up(progress=False)  # the internal topic drained
        assert totals(out) == exact(feed)
