from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import get_args

import pytest

from kspark import StreamsConfig
from kspark._typing import HandlerName
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


# -- handlers and the dead-letter topic by name (issue 21) -------------------------------


def test_handler_short_names_resolve_to_their_class() -> None:
    from kspark import errors

    cfg = StreamsConfig(
        application_id="a",
        processing_exception_handler="log-and-continue",
        deserialization_exception_handler="dead-letter-queue",
        production_exception_handler="log-and-fail",
    )
    assert cfg.processing_exception_handler is errors.LogAndContinueProcessingExceptionHandler
    assert (
        cfg.deserialization_exception_handler
        is errors.DeadLetterQueueDeserializationExceptionHandler
    )
    assert cfg.production_exception_handler is errors.LogAndFailProductionExceptionHandler


@pytest.mark.parametrize("option", ["processing", "deserialization", "production"], ids=lambda o: o)
@pytest.mark.parametrize("short", get_args(HandlerName))
def test_every_handler_name_of_the_literal_resolves_for_every_option(
    option: str, short: str
) -> None:
    from kspark import errors

    cfg = StreamsConfig(application_id="a", **{f"{option}_exception_handler": short})
    # "log-and-fail" -> LogAndFail<Option>ExceptionHandler
    camel = "".join(part.title() for part in short.split("-"))
    expected = getattr(errors, f"{camel}{option.title()}ExceptionHandler")
    assert getattr(cfg, f"{option}_exception_handler") is expected


def test_unknown_handler_name_names_the_key_and_the_accepted_names() -> None:
    with pytest.raises(ConfigError) as info:
        StreamsConfig(application_id="a", processing_exception_handler="no-such-handler")
    message = str(info.value)
    assert "processing_exception_handler" in message
    assert "'log-and-fail'" in message and "'dead-letter-queue'" in message
    assert info.value.params["option"] == "processing_exception_handler"
    with pytest.raises(ConfigError, match="processing_exception_handler"):
        StreamsConfig.from_mapping(
            {"application_id": "a", "processing_exception_handler": "no-such-handler"}
        )


def test_handler_by_dotted_path_is_imported_and_checked() -> None:
    from kspark import errors

    path = "kspark.errors:LogAndContinueProcessingExceptionHandler"
    cfg = StreamsConfig(application_id="a", processing_exception_handler=path)
    assert cfg.processing_exception_handler is errors.LogAndContinueProcessingExceptionHandler
    dotted = "kspark.errors.LogAndContinueProcessingExceptionHandler"
    assert StreamsConfig(
        application_id="a", processing_exception_handler=dotted
    ).processing_exception_handler is (errors.LogAndContinueProcessingExceptionHandler)
    # a handler of another kind
    with pytest.raises(
        ConfigError, match=r"ProductionExceptionHandler'>, a ProductionExceptionHandler$"
    ):
        StreamsConfig(
            application_id="a",
            processing_exception_handler="kspark.errors:LogAndContinueProductionExceptionHandler",
        )
    # not a handler at all
    with pytest.raises(ConfigError, match="processing_exception_handler must be"):
        StreamsConfig(application_id="a", processing_exception_handler="os.path:join")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        StreamsConfig(application_id="a", processing_exception_handler="no_such_module_xyz:H")
    with pytest.raises(ConfigError, match="has no 'Nope'"):
        StreamsConfig(application_id="a", processing_exception_handler="kspark.errors:Nope")


def test_handler_instances_and_classes_are_checked_on_construction() -> None:
    from kspark import errors

    handler = errors.LogAndContinueProcessingExceptionHandler()
    assert (
        StreamsConfig(
            application_id="a", processing_exception_handler=handler
        ).processing_exception_handler
        is handler
    )
    with pytest.raises(ConfigError, match="production_exception_handler"):
        StreamsConfig(application_id="a", production_exception_handler=object())
    with pytest.raises(ConfigError, match=r"a ProcessingExceptionHandler$"):
        StreamsConfig(
            application_id="a",
            production_exception_handler=errors.LogAndFailProcessingExceptionHandler,
        )


def test_dead_letter_topic_from_a_config_file_table() -> None:
    cfg = StreamsConfig.from_mapping(
        {
            "application_id": "a",
            "processing_exception_handler": "dead-letter-queue",
            "dead_letter_queue_topic": {"name": "dlq", "format": "jsonl", "path": "/tmp/dlq"},
        }
    )
    assert cfg.dead_letter_queue_topic is not None
    assert (cfg.dead_letter_queue_topic.name, cfg.dead_letter_queue_topic.format) == (
        "dlq",
        "jsonl",
    )
    with pytest.raises(ConfigError, match="dead_letter_queue_topic"):
        StreamsConfig.from_mapping(
            {"application_id": "a", "dead_letter_queue_topic": {"name": "dlq", "format": "jsonl"}}
        )
    with pytest.raises(ConfigError, match="dead_letter_queue_topic"):
        StreamsConfig.from_mapping(
            {"application_id": "a", "dead_letter_queue_topic": {"name": "dlq", "colour": "red"}}
        )


def test_cli_config_file_sets_handlers_and_rejects_unknown_keys(tmp_path: Path) -> None:
    from kspark import errors
    from kspark.cli import load_config

    toml = tmp_path / "app.toml"
    toml.write_text(
        'processing_exception_handler = "dead-letter-queue"\n'
        'deserialization_exception_handler = "log-and-continue"\n'
        "[dead_letter_queue_topic]\n"
        'name = "dlq"\nformat = "jsonl"\npath = "/tmp/kspark-dlq"\n'
    )
    cfg = load_config(str(toml), "payments")
    assert cfg.application_id == "payments"
    assert cfg.processing_exception_handler is errors.DeadLetterQueueProcessingExceptionHandler
    assert cfg.dead_letter_queue_topic is not None and cfg.dead_letter_queue_topic.name == "dlq"
    bad = tmp_path / "bad.json"
    bad.write_text('{"procesing_exception_handler": "log-and-continue"}')
    with pytest.raises(ConfigError, match="procesing_exception_handler"):
        load_config(str(bad), "payments")


def test_num_partitions_is_bounded_by_the_key_hash_slots() -> None:
    """A task is one of the key hash's 4096 slots: more tasks is a config error that
    says so, not a failure in the workers."""
    assert StreamsConfig(application_id="a", num_partitions=4096).num_partitions == 4096
    with pytest.raises(ConfigError, match="at most 4096") as info:
        StreamsConfig(application_id="a", num_partitions=4097)
    assert info.value.params["option"] == "num_partitions"
    # the bound is the placement's own
    from kspark.config import MAX_PARTITIONS
    from kspark_server.placement import MAX_TASKS

    assert MAX_PARTITIONS == MAX_TASKS


def test_a_rescale_beyond_the_key_hash_slots_is_refused_before_it_reads_anything() -> None:
    from kspark.errors import RescaleError
    from kspark.runtime.regroup import rescale

    app = NotStarted(StreamsConfig(application_id="a"))
    with pytest.raises(RescaleError, match="at most 4096"):
        rescale(app, 5000, lambda _phase: None)  # type: ignore[arg-type]


class NotStarted:
    """What a rescale reads of an app before it reads anything of the app's checkpoint:
    its config and topology, and that it has no query."""

    def __init__(self, config: StreamsConfig, topology: object = None) -> None:
        self.config, self.topology, self.query = config, topology, None


def test_the_removed_runner_is_refused_with_what_to_do() -> None:
    from kspark.errors import ConfigError

    assert StreamsConfig(application_id="a").stateful_runner == "apply_in_pandas"
    assert StreamsConfig(application_id="a", stateful_runner="apply_in_pandas")
    with pytest.raises(ConfigError, match="was removed") as e:
        StreamsConfig(application_id="a", stateful_runner="transform_with_state")  # type: ignore[arg-type]
    assert e.value.code == "KSPARK_INVALID_CONFIG"
    assert e.value.params == {"option": "stateful_runner"}
    assert "new checkpoint_dir" in str(e.value)
    with pytest.raises(ConfigError, match="must be one of"):
        StreamsConfig(application_id="a", stateful_runner="other")  # type: ignore[arg-type]
