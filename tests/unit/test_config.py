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
