"""``StreamsConfig``: an app's settings, validated on construction."""

from __future__ import annotations

import importlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, TypeGuard, get_args

import attrs

from kspark import errors
from kspark._paths import resolve_path
from kspark._typing import FileSink, HandlerName, KafkaClient, StatefulRunner, TimestampPolicy
from kspark.errors import ConfigError, KSparkError
from kspark.plan.nodes import TopicSpec

__all__ = ["ROCKSDB_PROVIDER", "StreamsConfig", "check_application_id", "state_store_conf"]

_APP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_application_id(value: object) -> str:
    """``value`` if it is a valid ``application_id``, else :class:`ConfigError`.

    The id names files and folders (checkpoints, ``~/.kspark/apps/<id>.json``), so it must
    match as a whole: ``fullmatch``, because ``$`` would also accept a trailing newline.

    Parameters
    ----------
    value
        The id to check.

    Returns
    -------
    str
        ``value``, a valid id.

    Raises
    ------
    ConfigError
        If ``value`` is not 1-200 letters, digits, ``.``, ``_`` or ``-`` starting with a
        letter or digit.

    Examples
    --------
    >>> check_application_id("payments-1")
    'payments-1'
    >>> check_application_id("../x")
    Traceback (most recent call last):
    ...
    kspark.errors.ConfigError: [KSPARK_INVALID_CONFIG] application_id must be ...
    """
    if not isinstance(value, str) or not _APP_ID.fullmatch(value):
        raise ConfigError(
            f"application_id must be 1-200 characters of letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit; got {value!r}",
            option="application_id",
        )
    return value


def _check_app_id(_inst: object, _attr: object, value: Any) -> None:
    check_application_id(value)


def _one_of(name: str, choices: Any) -> Any:
    """A validator of option ``name``: one of the values of the ``Literal`` ``choices``."""

    def check(_inst: object, _attr: object, value: object) -> None:
        if value not in get_args(choices):
            raise ConfigError(
                f"{name} must be one of {list(get_args(choices))}, got {value!r}", option=name
            )

    return check


def _stateful_runner(_inst: object, _attr: object, value: object) -> None:
    """The validator of ``stateful_runner``: ``"apply_in_pandas"``, the one runner left."""
    if value == "transform_with_state":
        raise ConfigError(
            "stateful_runner='transform_with_state' was removed: kspark runs its stateful "
            "operators under applyInPandasWithState, with their state in its own files in "
            "the checkpoint. Leave stateful_runner out (or set 'apply_in_pandas'); a "
            "checkpoint written by that runner cannot be read: run the app from its sources "
            "with a new checkpoint_dir (or application_id)",
            option="stateful_runner",
        )
    _one_of("stateful_runner", StatefulRunner)(_inst, _attr, value)


def _positive_int(name: str, *, optional: bool = False) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}", option=name)

    return check


def _non_negative_int(_inst: object, attr: Any, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{attr.name} must be an int of 0 or more, got {value!r}", option=attr.name
        )


#: the most tasks an app may have: a record's task is its key's hash modulo this many
#: slots (``kspark_server.placement.MAX_TASKS``), then modulo the app's tasks
MAX_PARTITIONS = 4096


def _task_count(name: str) -> Any:
    positive = _positive_int(name)

    def check(inst: object, attr: object, value: object) -> None:
        positive(inst, attr, value)
        if value > MAX_PARTITIONS:  # type: ignore[operator]
            raise ConfigError(
                f"{name} must be at most {MAX_PARTITIONS}, got {value!r}: a task is a "
                f"slot of the key hash's {MAX_PARTITIONS} slots",
                option=name,
            )

    return check


def _bool(name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be True or False, got {value!r}", option=name)

    return check


def _topics_tuple(
    value: Mapping[str, TopicSpec] | tuple[tuple[str, TopicSpec], ...] | None,
) -> tuple[tuple[str, TopicSpec], ...]:
    if value is None:
        return ()
    items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, Mapping) else value
    pairs = []
    for name, topic in items:
        if not isinstance(name, str) or not name or not isinstance(topic, TopicSpec):
            raise ConfigError(
                "topics must map topic names to Topics, such as "
                f"{{'orders': Topic.jsonl('orders', '/data/orders')}}; got {name!r}: {topic!r}",
                option="topics",
            )
        pairs.append((name, topic))
    return tuple(sorted(pairs, key=lambda p: p[0]))


def _optional_str(name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{name} must be a non-empty str or None, got {value!r}", option=name)

    return check


#: Type names a config file may give a topic's ``key_type`` and ``value_type``, besides
#: ``package.module:ClassName``.
_TYPE_NAMES: dict[str, object] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "bytes": bytes,
    "dict": dict,
    "list": list,
    "any": Any,
}


def _file_types(name: str, fields: dict[str, Any]) -> None:
    """A config file's ``key_type``/``value_type`` of topic ``name``, given as a type name
    or ``package.module:ClassName``, as the Python type."""
    for what in ("key_type", "value_type"):
        ref = fields.get(what)
        if not isinstance(ref, str):
            continue
        if ref in _TYPE_NAMES:
            fields[what] = _TYPE_NAMES[ref]
            continue
        module_name, _, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
        try:
            fields[what] = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(
                f"topics.{name}.{what}: cannot find type {ref!r} ({exc}); use one of "
                f"{sorted(_TYPE_NAMES)} or a class as 'package.module:ClassName'",
                option="topics",
                topic=name,
            ) from exc


def _topic_fields(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``TopicSpec`` fields of topic ``name`` given as a table of a config file:
    its ``options`` as sorted pairs, its ``key_type`` and ``value_type`` as types."""
    fields = dict(data)
    if isinstance(fields.get("options"), Mapping):
        fields["options"] = _conf_tuple(fields["options"])
    _file_types(name, fields)
    return fields


def _topic_from_mapping(name: str, data: Any) -> TopicSpec:
    """A binding read from a config file: ``{"format": "jsonl", "path": "/data/x"}``."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"topics.{name} must be a table of Topic fields (format, path, ...), got {data!r}",
            option="topics",
        )
    fields = _topic_fields(name, {"name": name, **data})
    try:
        return TopicSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"topics.{name}: {exc}", option="topics") from exc


# Per handler option: the handler base class it takes, and the Kafka-style short names a
# config file may use for the built-in handlers.
_HANDLERS: dict[str, tuple[type, dict[HandlerName, type]]] = {
    "processing_exception_handler": (
        errors.ProcessingExceptionHandler,
        {
            "log-and-fail": errors.LogAndFailProcessingExceptionHandler,
            "log-and-continue": errors.LogAndContinueProcessingExceptionHandler,
            "dead-letter-queue": errors.DeadLetterQueueProcessingExceptionHandler,
        },
    ),
    "deserialization_exception_handler": (
        errors.DeserializationExceptionHandler,
        {
            "log-and-fail": errors.LogAndFailDeserializationExceptionHandler,
            "log-and-continue": errors.LogAndContinueDeserializationExceptionHandler,
            "dead-letter-queue": errors.DeadLetterQueueDeserializationExceptionHandler,
        },
    ),
    "production_exception_handler": (
        errors.ProductionExceptionHandler,
        {
            "log-and-fail": errors.LogAndFailProductionExceptionHandler,
            "log-and-continue": errors.LogAndContinueProductionExceptionHandler,
            "dead-letter-queue": errors.DeadLetterQueueProductionExceptionHandler,
        },
    ),
}


def _is_handler_name(value: str) -> TypeGuard[HandlerName]:
    return value in get_args(HandlerName)


def _import_handler(option: str, ref: str, accepted: str) -> object:
    module_name, _, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(
            f"{option}: unknown handler {ref!r}; use one of {accepted}, or a class as "
            "'package.module:ClassName'",
            option=option,
            value=ref,
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{option}: cannot import {module_name!r} for handler {ref!r}: {exc}; "
            f"use one of {accepted}, or a class as 'package.module:ClassName'",
            option=option,
            value=ref,
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"{option}: module {module_name!r} has no {attr!r} (handler {ref!r})",
            option=option,
            value=ref,
        ) from None


def _check_handler(option: str, value: object) -> object:
    """A handler option's value: a short name or ``module:Class`` becomes the class; a
    class or an instance is checked to be a handler of the option's kind."""
    if value is None:
        return None
    base, names = _HANDLERS[option]
    accepted = ", ".join(repr(name) for name in names)
    if isinstance(value, str):
        value = (
            names[value] if _is_handler_name(value) else _import_handler(option, value, accepted)
        )
    cls = value if isinstance(value, type) else type(value)
    wrong = [b for b, _ in _HANDLERS.values() if b is not base and issubclass(cls, b)]
    if wrong or not callable(getattr(value, "handle", None)):
        kind = f", a {wrong[0].__name__}" if wrong else ""
        raise ConfigError(
            f"{option} must be a {base.__name__} (a class, an instance, one of "
            f"{accepted}, or 'package.module:ClassName'); got {value!r}{kind}",
            option=option,
            value=value,
        )
    return value


# named converters, as attrs' mypy plugin needs them
def _processing_handler(value: object) -> object:
    return _check_handler("processing_exception_handler", value)


def _deserialization_handler(value: object) -> object:
    return _check_handler("deserialization_exception_handler", value)


def _production_handler(value: object) -> object:
    return _check_handler("production_exception_handler", value)


def _topic(value: object) -> object:
    """A topic given as a table of a config file (``{name=..., format=..., path=...}``)."""
    if not isinstance(value, Mapping):
        return value
    fields = _topic_fields(str(value.get("name", "?")), value)
    try:
        return TopicSpec(**fields)
    except (TypeError, KSparkError) as exc:
        raise ConfigError(
            f"dead_letter_queue_topic: {exc}; a topic is a table such as "
            "{name = 'dlq', format = 'jsonl', path = '/data/dlq'}",
            option="dead_letter_queue_topic",
        ) from exc


def _conf_tuple(
    value: Mapping[str, Any] | tuple[tuple[str, str], ...] | None,
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), str(v)) for k, v in items))


@attrs.frozen(kw_only=True)
class StreamsConfig:
    """The settings of a kspark app.

    Every option is a keyword argument; only ``application_id`` is required. A JSON or
    TOML file of the same names is read by :meth:`from_mapping`.

    Parameters
    ----------
    application_id
        Identifies the app: it names the streaming query and the checkpoint folder.
    checkpoint_dir
        Where the app keeps its checkpoints and state, on the Spark server's file system.
        Defaults to ``<tmp>/kspark/<application_id>``. A relative or ``~`` path is
        resolved on the client, against its working directory; a URI is kept as it is.
    num_partitions
        The number of tasks: logical partitions by key hash, like a Kafka topic's
        partitions, from 1 to 4096. Stream time and state are per task. To change it on an existing
        checkpoint, use :meth:`kspark.StreamsApp.rescale` (``kspark rescale``).
    shuffle_partitions
        Physical parallelism of the shuffles (``spark.sql.shuffle.partitions``).
        Defaults to ``num_partitions``.
    max_files_per_trigger
        For file sources, the most files per micro-batch (None: all new files).
    trigger_interval
        Trigger interval of :meth:`StreamsApp.start` (None: a batch as soon as the last
        ends).
    processing_exception_handler
        Handler for exceptions thrown by user functions (KIP-1033): an instance, a class,
        a built-in's short name (``"log-and-fail"``, ``"log-and-continue"``,
        ``"dead-letter-queue"``) or a class's path ``"package.module:ClassName"``. Names
        are resolved to their class when the config is built.
    deserialization_exception_handler
        Handler for records that cannot be read as the declared key or value type; given
        as for ``processing_exception_handler``.
    production_exception_handler
        Handler for records that cannot be written to a sink; given as for
        ``processing_exception_handler``.
    dead_letter_queue_topic
        Where dead-letter records go (KIP-1034), for handlers that resume with them. In a
        config file, a table of the topic's fields:
        ``{name = "dlq", format = "jsonl", path = "/data/dlq"}``.
    dead_letter_dropped_records
        Also write the records that operators drop by their rules (a null key in a join,
        a stream record older than a versioned table's history retention, an expired
        versioned put...) to the dead-letter queue, with the reason as the message
        (proposed for Kafka Streams as KIP-1328). Either way they are counted in
        ``dropped-records-total`` with their reason (docs/errors.md). Needs
        ``dead_letter_queue_topic``.
    timestamp_policy
        What happens to a record whose timestamp is null or negative, as Kafka Streams'
        timestamp extractors decide: ``"fail"`` stops the app with an error naming the
        source processor and the record; ``"skip"`` drops it, counted in
        ``dropped-records-total`` with reason ``invalid-timestamp`` (and dead-lettered
        with ``dead_letter_dropped_records``); ``"use-partition-time"`` gives it the
        largest timestamp seen before it in its partition (docs/errors.md, "Invalid
        timestamps").
    kafka_client
        How Kafka topics are read and written: ``"auto"`` (the JVM connector if the
        server has it, else kspark's Python Kafka source and sink), ``"jvm"`` or
        ``"python"``.
    file_sink
        How file topics (JSON lines, Parquet, CSV) are written: ``"spark"``, Spark's own
        streaming file sink, written by the JVM and exactly once through the topic's
        ``_spark_metadata`` log; ``"batch_folders"``, one ``batch_id=N`` folder per
        micro-batch through ``foreachBatch`` (a Python process per query, about 2 s
        more per start); or ``"auto"`` (the default): Spark's sink for an app without
        state that writes one file topic, has no dead-letter queue and was never
        rescaled, into a topic that is not already in the other layout; batch folders
        otherwise. A topic keeps the layout it was first written in
        (docs/concepts.md, "One streaming query per app").
    state_snapshot_min_deltas
        A snapshot of a state partition is taken after this many micro-batches
        (changelog files) since the last one
        (``spark.sql.streaming.stateStore.minDeltasForSnapshot``). A restore loads the
        last snapshot and replays the changelog files after it, so this bounds the replay.
    state_maintenance_interval
        How often the state store's background maintenance uploads snapshots and deletes
        old files (``spark.sql.streaming.stateStore.maintenanceInterval``). Spark reads it
        once per executor JVM, when the first stateful query of that JVM starts: set it at
        server start on a shared cluster (see docs/configuration.md).
    state_min_batches_to_retain
        Micro-batches of state history kept in the checkpoint
        (``spark.sql.streaming.minBatchesToRetain``); older snapshots and changelog files
        are deleted by maintenance.
    state_changelog_checkpointing
        RocksDB changelog checkpointing: each micro-batch writes only its changes, and
        snapshots are uploaded in the background
        (``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled``).
    state_compact_on_commit
        Compact RocksDB on every commit
        (``spark.sql.streaming.stateStore.rocksdb.compactOnCommit``): smaller snapshots,
        slower commits.
    state_memory_mb
        Bound the memory of all RocksDB state stores of an executor to this many MiB
        (``spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage`` and
        ``maxMemoryUsageMB``). None: unbounded, Spark's default. The first bounded store
        of a JVM fixes the size.
    state_base_chunk_bytes
        Tuning: a stateful task's durable base is written in chunks of about this many
        bytes (one entry larger than that is a chunk of its own), so that no reader needs
        a whole base in one value.
    state_check_log
        Checks, for tests: after every micro-batch, each stateful task reads its durable
        base and log back and compares them with its state, and logs changes against
        bases of any size. Slow; an inconsistency stops the app.
    state_dir
        Where the executors keep the stateful tasks' local stores (Kafka Streams'
        ``state.dir``): a path on each executor's local disk; an app's stores are in
        ``<state_dir>/<application_id>``. None: the executor's
        ``$KSPARK_LOCAL_STATE_DIR`` (``$KSPARK_HOME/local-state`` on a server that kspark
        starts), else ``<tmp>/kspark-state``. The local stores are caches of the durable
        state in the checkpoint that outlive restarts: a store at the committed version
        is used as it is, one behind catches up from the durable log, any other is
        rebuilt. ``app.clean_up()`` deletes them.
    stateful_runner
        Which Spark API runs the stateful operators; kept for compatibility, the one
        value is ``"apply_in_pandas"`` (``applyInPandasWithState``; records reach the
        operators straight from the shuffle, the state is kept in kspark's own files in
        the checkpoint, which interactive queries, replicas, rescale and standby replicas
        read; an app with several stateful operators is cut into sub-topologies joined by
        internal topics under ``checkpoint_dir``; docs/design/grouped-runner.md).
        ``"transform_with_state"`` was removed: it raises :class:`~kspark.errors.ConfigError`.
    num_standby_replicas
        Standby replicas (Kafka Streams' ``num.standby.replicas``): keep warm copies of
        each stateful task's local stores on this many other executors' disks, brought up
        to date from the committed state after each micro-batch by a small job of its own,
        off the batches' path. A task that Spark runs where a copy is (after an executor
        is lost) promotes it instead of rebuilding its store (``app.restore_listener``'s
        ``on_standby_promoted``). 0 (the default): none. Needs several
        executors with their own local disks (docs/deployment.md, "Standby replicas").
    topics
        Bindings of the topology's topic names to where they live: name ->
        ``Topic.jsonl(...)``, ``Topic.parquet(...)``, ``Topic.kafka(...)`` or
        ``Topic.table(...)``. Given as a mapping, stored as a tuple of ``(name, Topic)``
        pairs sorted by name. A name the topology binds itself (``stream(Topic...)``) must
        not be bound to another Topic here.
    bootstrap_servers
        Every name without a binding in ``topics`` is a Kafka topic of that name on this
        cluster (``host:port[,host:port...]``).
    data_dir
        Otherwise, every name without a binding is a directory of JSON lines in the
        envelope layout, ``<data_dir>/<name>``, on the Spark server's file system.
    spark_conf
        Extra Spark SQL settings applied to the session before the app starts; they
        override the settings above.

    Examples
    --------
    >>> from kspark import Topic
    >>> cfg = StreamsConfig(
    ...     application_id="payments",
    ...     num_partitions=8,
    ...     processing_exception_handler="log-and-continue",
    ...     topics={"rates": Topic.parquet("rates", "/lake/rates")},
    ...     data_dir="/data",
    ... )
    >>> cfg.num_partitions, cfg.processing_exception_handler.__name__
    (8, 'LogAndContinueProcessingExceptionHandler')
    >>> StreamsConfig(application_id="bad id")
    Traceback (most recent call last):
    ...
    kspark.errors.ConfigError: [KSPARK_INVALID_CONFIG] application_id must be ...
    """

    application_id: str = attrs.field(validator=_check_app_id)
    checkpoint_dir: str = attrs.field(default=None)
    num_partitions: int = attrs.field(default=4, validator=_task_count("num_partitions"))
    shuffle_partitions: int | None = attrs.field(
        default=None, validator=_positive_int("shuffle_partitions", optional=True)
    )
    max_files_per_trigger: int | None = attrs.field(
        default=None, validator=_positive_int("max_files_per_trigger", optional=True)
    )
    trigger_interval: timedelta | None = None
    processing_exception_handler: Any = attrs.field(default=None, converter=_processing_handler)
    deserialization_exception_handler: Any = attrs.field(
        default=None, converter=_deserialization_handler
    )
    production_exception_handler: Any = attrs.field(default=None, converter=_production_handler)
    dead_letter_queue_topic: TopicSpec | None = attrs.field(default=None, converter=_topic)
    dead_letter_dropped_records: bool = attrs.field(
        default=False, validator=_bool("dead_letter_dropped_records")
    )
    timestamp_policy: TimestampPolicy = attrs.field(
        default="fail", validator=_one_of("timestamp_policy", TimestampPolicy)
    )
    kafka_client: KafkaClient = attrs.field(
        default="auto", validator=_one_of("kafka_client", KafkaClient)
    )
    file_sink: FileSink = attrs.field(default="auto", validator=_one_of("file_sink", FileSink))
    state_snapshot_min_deltas: int = attrs.field(
        default=5, validator=_positive_int("state_snapshot_min_deltas")
    )
    state_maintenance_interval: timedelta = timedelta(seconds=30)
    state_min_batches_to_retain: int = attrs.field(
        default=100, validator=_positive_int("state_min_batches_to_retain")
    )
    state_changelog_checkpointing: bool = attrs.field(
        default=True, validator=_bool("state_changelog_checkpointing")
    )
    state_compact_on_commit: bool = attrs.field(
        default=False, validator=_bool("state_compact_on_commit")
    )
    state_memory_mb: int | None = attrs.field(
        default=None, validator=_positive_int("state_memory_mb", optional=True)
    )
    state_base_chunk_bytes: int = attrs.field(
        default=32 << 20, validator=_positive_int("state_base_chunk_bytes")
    )
    state_check_log: bool = attrs.field(default=False, validator=_bool("state_check_log"))
    state_dir: str | None = attrs.field(default=None, validator=_optional_str("state_dir"))
    stateful_runner: StatefulRunner = attrs.field(
        default="apply_in_pandas", validator=_stateful_runner
    )
    num_standby_replicas: int = attrs.field(default=0, validator=_non_negative_int)
    topics: tuple[tuple[str, TopicSpec], ...] = attrs.field(default=None, converter=_topics_tuple)
    bootstrap_servers: str | None = attrs.field(
        default=None, validator=_optional_str("bootstrap_servers")
    )
    data_dir: str | None = attrs.field(default=None, validator=_optional_str("data_dir"))
    spark_conf: tuple[tuple[str, str], ...] = attrs.field(default=None, converter=_conf_tuple)

    def __attrs_post_init__(self) -> None:
        if self.checkpoint_dir is None:
            object.__setattr__(
                self,
                "checkpoint_dir",
                os.path.join(tempfile.gettempdir(), "kspark", self.application_id),
            )
        elif not isinstance(self.checkpoint_dir, str) or not self.checkpoint_dir:  # type: ignore[redundant-expr]
            raise ConfigError("checkpoint_dir must be a non-empty path", option="checkpoint_dir")
        else:
            # a relative or ~ path would resolve on the server, against its working directory
            object.__setattr__(self, "checkpoint_dir", resolve_path(self.checkpoint_dir))
        if self.data_dir:
            # the same rule, so that the folder is the one the client meant when it was made
            object.__setattr__(self, "data_dir", resolve_path(self.data_dir))
        interval: object = self.trigger_interval
        if interval is not None and (
            not isinstance(interval, timedelta) or interval <= timedelta(0)
        ):
            raise ConfigError(
                f"trigger_interval must be a positive timedelta, got {self.trigger_interval!r}",
                option="trigger_interval",
            )
        maintenance: object = self.state_maintenance_interval
        if not isinstance(maintenance, timedelta) or maintenance < timedelta(milliseconds=1):
            raise ConfigError(
                "state_maintenance_interval must be a timedelta of at least 1 ms, got "
                f"{maintenance!r}",
                option="state_maintenance_interval",
            )
        if self.dead_letter_queue_topic is not None and not isinstance(
            self.dead_letter_queue_topic, TopicSpec
        ):
            raise ConfigError(
                "dead_letter_queue_topic must be a Topic, such as Topic.jsonl(name, path)",
                option="dead_letter_queue_topic",
            )
        if self.dead_letter_dropped_records and self.dead_letter_queue_topic is None:
            raise ConfigError(
                "dead_letter_dropped_records=True writes dropped records to the dead-letter "
                "queue; set StreamsConfig(dead_letter_queue_topic=Topic...) too",
                option="dead_letter_dropped_records",
            )

    @property
    def topic_bindings(self) -> dict[str, TopicSpec]:
        """``topics`` as a dict, name -> Topic."""
        return dict(self.topics)

    @property
    def effective_shuffle_partitions(self) -> int:
        """``shuffle_partitions``, or ``num_partitions`` when it is None."""
        return self.shuffle_partitions or self.num_partitions

    def with_(self, **changes: Any) -> StreamsConfig:
        """A copy with ``changes`` applied (and validated).

        Parameters
        ----------
        **changes
            Options to change, by name.

        Returns
        -------
        StreamsConfig
            The new config; this one is unchanged.

        Examples
        --------
        >>> cfg = StreamsConfig(application_id="a")
        >>> cfg.with_(num_partitions=2).num_partitions, cfg.num_partitions
        (2, 4)
        """
        return attrs.evolve(self, **changes)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StreamsConfig:
        """A config from a dict, as read from a JSON or TOML file; unknown keys are errors.

        Parameters
        ----------
        data
            Option names to values. Durations may be numbers of seconds, handlers short
            names or ``"package.module:ClassName"``, and ``topics`` a table of tables of
            ``Topic`` fields.

        Returns
        -------
        StreamsConfig
            The validated config.

        Examples
        --------
        >>> cfg = StreamsConfig.from_mapping({
        ...     "application_id": "payments",
        ...     "trigger_interval": 5,
        ...     "topics": {"rates": {"format": "parquet", "path": "/lake/rates"}},
        ... })
        >>> cfg.trigger_interval, cfg.topic_bindings["rates"].format
        (datetime.timedelta(seconds=5), 'parquet')
        """
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown config option(s) {unknown}; known: {sorted(known)}", options=unknown
            )
        values = dict(data)
        if isinstance(values.get("topics"), Mapping):
            values["topics"] = {
                str(name): _topic_from_mapping(str(name), topic)
                for name, topic in values["topics"].items()
            }
        for key in ("trigger_interval", "state_maintenance_interval"):
            if isinstance(values.get(key), int | float):
                values[key] = timedelta(seconds=values[key])
        return cls(**values)


ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_SS = "spark.sql.streaming.stateStore."


def state_store_conf(config: StreamsConfig) -> list[tuple[str, str]]:
    """The Spark settings of an app's state stores, to set on the session before it starts.

    All of them are read from the session when a query starts, with two caveats (see
    ``docs/configuration.md``): the provider class is pinned by the checkpoint (a restarted
    query keeps the provider it was created with), and the maintenance interval and the
    bounded-memory size are fixed by the first stateful query of each executor JVM.

    Parameters
    ----------
    config
        The app's settings.

    Returns
    -------
    list of (key, value)
        In the order to set them.

    Examples
    --------
    >>> from datetime import timedelta
    >>> cfg = StreamsConfig(application_id="a", state_memory_mb=512,
    ...                     state_maintenance_interval=timedelta(seconds=10))
    >>> conf = dict(state_store_conf(cfg))
    >>> conf["spark.sql.streaming.stateStore.maintenanceInterval"]
    '10000ms'
    >>> conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"]
    '512'
    """
    ms = int(config.state_maintenance_interval.total_seconds() * 1000)
    pairs = [
        (_SS + "providerClass", ROCKSDB_PROVIDER),
        (
            _SS + "rocksdb.changelogCheckpointing.enabled",
            str(config.state_changelog_checkpointing).lower(),
        ),
        (_SS + "minDeltasForSnapshot", str(config.state_snapshot_min_deltas)),
        (_SS + "maintenanceInterval", f"{ms}ms"),
        ("spark.sql.streaming.minBatchesToRetain", str(config.state_min_batches_to_retain)),
        (_SS + "rocksdb.compactOnCommit", str(config.state_compact_on_commit).lower()),
    ]
    if config.state_memory_mb is not None:
        pairs += [
            (_SS + "rocksdb.boundedMemoryUsage", "true"),
            (_SS + "rocksdb.maxMemoryUsageMB", str(config.state_memory_mb)),
        ]
    return pairs
