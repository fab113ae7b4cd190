"""What does not read the ``apply_in_pandas`` runner's state yet says so: interactive
queries, replicas and rescale refuse such an app with an error naming the setting, where
they would otherwise answer from state the runner does not write (an empty store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.errors import RescaleError, StoreError
from kspark.runtime.rescale import rescale


def _app(runner: Any, tmp: Path) -> StreamsApp:
    b = StreamsBuilder()
    counts = b.stream("in", key_type=str, value_type=int).group_by_key()
    counts.count(materialized=Materialized.as_("counts")).to_stream().to("out")
    config = StreamsConfig(
        application_id="grouped-readers", data_dir=str(tmp), stateful_runner=runner
    )
    return StreamsApp(b.build(), config)


@pytest.mark.parametrize("read", ["store", "replica"])
def test_store_readers_refuse_the_grouped_runner(read: str, tmp_path: Path) -> None:
    app = _app("apply_in_pandas", tmp_path)
    with pytest.raises(StoreError, match="stateful_runner='apply_in_pandas'"):
        getattr(app, read)("counts")


def test_rescale_refuses_the_grouped_runner(tmp_path: Path) -> None:
    app = _app("apply_in_pandas", tmp_path)
    with pytest.raises(RescaleError, match="stateful_runner='apply_in_pandas'"):
        rescale(None, app.topology, app.config, 2)
