"""Rescaling an app on Spark: while it runs (warm,
with records arriving during the build, the catch-up and the switch), and stopped; and a
rescale that fails part way leaves the old layout running. Every record's result comes
out exactly once, as one clean run gives it."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime.app import State
from kspark.runtime.checkpoints import current_generation

pytestmark = pytest.mark.spark


def topology(src: str, out: str) -> Any:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", src), key_type=str, value_type=str)
        # a long interval: the answer does not depend on stream time, which is per task
        .deduplicate_by_key(timedelta(days=1))
        .to(Topic.jsonl("out", out))
    )
    return b.build()


class Feeder:
    """Writes one input file per call: some new keys, some repeats of earlier ones (which
    only the state can drop). ``want`` is the values one clean run outputs."""

    def __init__(self, folder: str) -> None:
        self.folder, self.n = folder, itertools.count()
        self.want: list[str] = []

    def __call__(self, keys: int = 40) -> None:
        n = next(self.n)
        rows = [(f"k{n}-{i}", f"v{n}-{i}", n * 1000 + i) for i in range(keys)]
        if n:
            rows += [(f"k{n - 1}-{i}", f"again{n}-{i}", n * 1000 + 500 + i) for i in range(10)]
        self.want += [f"v{n}-{i}" for i in range(keys)]
        write_jsonl(self.folder, f"{n:04d}.jsonl", rows)


class Phases:
    """A progress reporter that calls ``on_phase(text)`` at each step of the rescale."""

    def __init__(self, on_phase: Callable[[str], None]) -> None:
        self.on_phase = on_phase
        self.seen: list[str] = []

    def update(self, progress: Mapping[str, Any]) -> None:
        pass

    def phase(self, text: str | None) -> None:
        if text:
            self.seen.append(text)
            self.on_phase(text)

    def close(self, summary: str | None = None) -> None:
        pass


def config(app_id: str, base: str, partitions: int) -> StreamsConfig:
    return StreamsConfig(
        application_id=app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        num_partitions=partitions,
        state_dir=os.path.join(base, "local"),
        state_check_log=True,
    )


def test_warm_rescale_gives_every_result_once_with_records_arriving(
    spark: Any, app_id: str
) -> None:
    with tempfile.TemporaryDirectory() as base:
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        feed = Feeder(src)
        app = StreamsApp(topology(src, out), config(app_id, base, 2), session=spark)
        for _ in range(3):
            feed()
        app.start()
        try:
            app.query.processAllAvailable()

            def during(text: str) -> None:
                # a file at every step; those of the build and the catch-ups are committed
                # by the old layout before the step goes on (a catch-up round follows it),
                # the one of the switch is left to the stop and the new layout
                feed()
                if text != "switching":
                    app.query.processAllAvailable()

            report = app.rescale(4, progress=Phases(during))
            assert report.warm and report.to_partitions == 4 and report.rounds >= 1
            assert app.state in (State.RUNNING, State.RESTORING)
            assert app.config.num_partitions == 4
            feed()
            app.query.processAllAvailable()
            # the new layout's tasks found the stores the build filled
            [restored] = app.restores()
            assert restored.tasks > 0 and restored.rows > 0 and restored.rebuilt_tasks == 0
            # and back down, warm again
            assert app.rescale(3, progress=Phases(during)).rounds >= 1
            feed()
            app.query.processAllAvailable()
        finally:
            app.stop()
        assert current_generation(spark, os.path.join(base, "chk")).number == 2
        assert jsonl_values(out) == sorted(feed.want)
        # stopped: the offline rescale on the files
        feed()
        stopped = StreamsApp(topology(src, out), config(app_id, base, 3), session=spark)
        assert not stopped.rescale(2, progress=False).warm
        feed()
        stopped.run_until_caught_up()
        assert jsonl_values(out) == sorted(feed.want)


class Killed(Exception):
    pass


@pytest.mark.parametrize("at", ["building", "catching up", "switching"])
def test_a_rescale_killed_part_way_leaves_the_old_layout_running(
    spark: Any, app_id: str, at: str
) -> None:
    with tempfile.TemporaryDirectory() as base:
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        feed = Feeder(src)
        app = StreamsApp(topology(src, out), config(app_id, base, 2), session=spark)
        feed()
        app.start()
        try:
            app.query.processAllAvailable()

            def kill(text: str) -> None:
                feed()  # a batch for the catch-up to follow
                if text.startswith(at) or (at == "catching up" and text == "switching"):
                    raise Killed(text)

            with pytest.raises(Killed):
                app.rescale(4, progress=Phases(kill))
            assert app.query.isActive and app.config.num_partitions == 2
            assert current_generation(spark, os.path.join(base, "chk")).number == 0
            feed()
            app.query.processAllAvailable()
            # the old layout goes on, and a later rescale starts afresh
            assert app.rescale(4, progress=False).warm
            feed()
            app.query.processAllAvailable()
        finally:
            app.stop()
        assert jsonl_values(out) == sorted(feed.want)
