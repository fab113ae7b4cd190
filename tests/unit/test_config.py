from __future__ import annotations

from datetime import timedelta

import pytest

from kspark import StreamsConfig
from kspark.errors import ConfigError


def test_defaults() -> None:
    cfg = StreamsConfig(application_id="a")
    assert cfg.num_partitions == 4 and cfg.checkpoint_dir.endswith("kspark/a")
    assert cfg.effective_shuffle_partitions == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"application_id": "has space"},
        {"application_id": ""},
        {"application_id": "a", "num_partitions": 0},
        {"application_id": "a", "num_partitions": True},
        {"application_id": "a", "trigger_interval": timedelta(0)},
        {"application_id": "a", "checkpoint_dir": ""},
        {"application_id": "a", "dead_letter_queue_topic": "dlq"},
    ],
)
def test_invalid_options_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        StreamsConfig(**kwargs)  # type: ignore[arg-type]


def test_from_mapping_rejects_unknown_keys() -> None:
    with pytest.raises(ConfigError, match="nope"):
        StreamsConfig.from_mapping({"application_id": "a", "nope": 1})
    cfg = StreamsConfig.from_mapping({"application_id": "a", "trigger_interval": 2})
    assert cfg.trigger_interval == timedelta(seconds=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"state_snapshot_min_deltas": 0},
        {"state_snapshot_min_deltas": "5"},
        {"state_min_batches_to_retain": 0},
        {"state_maintenance_interval": timedelta(0)},
        {"state_maintenance_interval": 30},
        {"state_changelog_checkpointing": "yes"},
        {"state_compact_on_commit": 1},
        {"state_memory_mb": 0},
    ],
)
def test_invalid_state_store_options_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        StreamsConfig(application_id="a", **kwargs)  # type: ignore[arg-type]


def test_state_store_conf() -> None:
    from kspark.config import ROCKSDB_PROVIDER, state_store_conf

    conf = dict(state_store_conf(StreamsConfig(application_id="a")))
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.streaming.stateStore.minDeltasForSnapshot"] == "5"
    assert conf["spark.sql.streaming.stateStore.maintenanceInterval"] == "30000ms"
    assert conf["spark.sql.streaming.minBatchesToRetain"] == "100"
    assert conf["spark.sql.streaming.stateStore.rocksdb.compactOnCommit"] == "false"
    assert "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage" not in conf
    cfg = StreamsConfig.from_mapping(
        {
            "application_id": "a",
            "state_maintenance_interval": 5,
            "state_memory_mb": 256,
            "state_changelog_checkpointing": False,
        }
    )
    conf = dict(state_store_conf(cfg))
    assert conf["spark.sql.streaming.stateStore.maintenanceInterval"] == "5000ms"
    assert conf["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] == "true"
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "256"
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "false"
