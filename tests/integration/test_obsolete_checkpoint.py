"""A checkpoint whose state the removed ``transform_with_state`` runner kept in Spark's
state store is refused at start, before anything runs: kspark cannot read that store.

The checkpoints are made by hand, with the files that runner's checkpoints hold (Spark's
commit log and the operator metadata of a ``transformWithStateInPandas`` operator, or a
generation its rescale recorded), not by running it."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import ObsoleteCheckpointError
from kspark.runtime.checkpoints import Generation

pytestmark = pytest.mark.spark

#: the operator metadata that Spark writes for the old runner's operator (its name and
#: state variables as Spark 4 writes them)
TWS_METADATA = {
    "operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateInPandasExec"},
    "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 2}],
    "operatorPropertiesJson": json.dumps(
        {
            "timeMode": "NoTime",
            "outputMode": "Append",
            "stateVariables": [
                {"stateName": "seen", "stateVariableType": "MapState", "ttlEnabled": False}
            ],
        }
    ),
}


def _app(tmp: Path, spark: Any) -> StreamsApp:
    (tmp / "in").mkdir(exist_ok=True)
    (tmp / "in" / "a.jsonl").write_text(json.dumps({"key": "a", "value": "1", "timestamp": 1}))
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", str(tmp / "in")), key_type=str, value_type=str)
        .deduplicate_by_key(timedelta(days=1))
        .to(Topic.jsonl("out", str(tmp / "out")))
    )
    cfg = StreamsConfig(application_id="old-app", checkpoint_dir=str(tmp / "chk"))
    return StreamsApp(b.build(), cfg, session=spark)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_checkpoint_of_the_removed_runner_is_refused(spark: Any, tmp_path: Path) -> None:
    query = tmp_path / "chk" / "query"
    _write(query / "commits" / "0", 'v1\n{"nextBatchWatermarkMs":0}')
    metadata = query / "state" / "0" / "_metadata" / "v2" / "0"
    _write(metadata, "v2\n" + json.dumps(TWS_METADATA))
    app = _app(tmp_path, spark)
    with pytest.raises(ObsoleteCheckpointError) as e:
        app.run_until_caught_up(progress=False)
    text = str(e.value)
    assert e.value.code == "KSPARK_OBSOLETE_CHECKPOINT"
    assert str(query) in text and str(metadata) in text
    assert "transform_with_state" in text and "new checkpoint_dir" in text
    # nothing ran: no output, no state files of kspark's own
    assert not os.path.exists(tmp_path / "out")
    assert not os.path.exists(query / "kspark-state")


def test_a_generation_of_the_removed_runners_rescale_is_refused(spark: Any, tmp_path: Path) -> None:
    app = _app(tmp_path, spark)
    gen = Generation(
        number=1,
        checkpoint=str(tmp_path / "chk" / "query-g1"),
        num_partitions=4,
        initial_state={"seen": str(tmp_path / "chk" / "rescale-g1" / "seen")},
    )
    _write(tmp_path / "chk" / "generations" / "g=000001" / "part-0.txt", gen.to_json())
    with pytest.raises(ObsoleteCheckpointError, match="rescale-g1"):
        app.run_until_caught_up(progress=False)
    assert not os.path.exists(tmp_path / "out")


def test_a_checkpoint_of_kspark_s_runner_starts_again(spark: Any, tmp_path: Path) -> None:
    """The check reads no more than the operator metadata: the runner's own checkpoint
    restarts (its operator's metadata names applyInPandasWithState)."""
    app = _app(tmp_path, spark)
    app.run_until_caught_up(progress=False)
    query = tmp_path / "chk" / "query"
    assert os.listdir(query / "state" / "0" / "_metadata")
    app.run_until_caught_up(progress=False)
