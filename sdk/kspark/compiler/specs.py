"""How the plan's topics and types become the operators' specs: topic references and
read schemas, Kafka record limits, the columns a SQL filter sees, key-value type pairs and
envelope schemas (used by the compiler and its rules, :mod:`kspark.compiler.rules`)."""

from __future__ import annotations

from typing import Any

from kspark import errors
from kspark.compiler import stages as st
from kspark.config import StreamsConfig
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.processing import StoreDef
from kspark.plan.types import DYNAMIC, Primitive, Record, TypeDesc
from kspark_server import envelope as env
from kspark_server import spec as sp

__all__ = [
    "bound_topic",
    "check_destinations",
    "deserialization_mode",
    "envelope_json",
    "kafka_record_limit",
    "key_value",
    "known_type",
    "read_schema",
    "sql_scope",
    "store_spec",
    "topic_ref",
]


def sql_scope(value_type: TypeDesc) -> tuple[tuple[str, str], ...]:
    """The columns a ``filter_expr`` condition sees, as ``(name, source)``: a record
    value's fields (any other value as ``value``), then the record's ``key`` and
    ``timestamp`` unless a field has that name (Spark's names ignore case).

    Examples
    --------
    >>> from kspark.plan.types import describe_type
    >>> sql_scope(describe_type(int))
    (('value', 'value'), ('key', 'key'), ('timestamp', 'timestamp'))
    """
    if isinstance(value_type, Record):
        scope = [(f.name, f"value.{f.name}") for f in value_type.fields]
    else:
        scope = [("value", "value")]
    taken = {name.lower() for name, _ in scope}
    scope += [(c, c) for c in ("key", "timestamp") if c not in taken]
    return tuple(scope)


def deserialization_mode(config: StreamsConfig) -> str:
    """Built-in deserialization handlers run in Spark itself, with no Python pass."""
    h = config.deserialization_exception_handler
    if h is None:
        return "fail"
    cls = h if isinstance(h, type) else type(h)
    modes = {
        errors.LogAndFailDeserializationExceptionHandler: "fail",
        errors.LogAndContinueDeserializationExceptionHandler: "continue",
        errors.DeadLetterQueueDeserializationExceptionHandler: "dlq",
    }
    if cls not in modes:
        raise errors.ConfigError(
            "deserialization_exception_handler must be one of the built-in handlers "
            f"({', '.join(c.__name__ for c in modes)}) in this version; got {cls.__name__}",
            option="deserialization_exception_handler",
        )
    if modes[cls] == "dlq" and config.dead_letter_queue_topic is None:
        raise errors.ConfigError(
            "DeadLetterQueueDeserializationExceptionHandler needs "
            "StreamsConfig(dead_letter_queue_topic=...)",
            option="dead_letter_queue_topic",
        )
    return modes[cls]


#: librdkafka's default ``message.max.bytes``, the limit of a Kafka sink that sets none.
KAFKA_MAX_MESSAGE_BYTES = 1_000_000


def kafka_record_limit(topic: n.TopicSpec) -> int:
    """The largest record, in bytes, that a Kafka sink into ``topic`` produces: the
    producer's ``message.max.bytes`` (``Topic.kafka(..., **{"kafka.message.max.bytes":
    "..."})``) or ``max.request.size``, whichever is smaller, and librdkafka's default of
    1,000,000 bytes if neither is given.

    Examples
    --------
    >>> from kspark import Topic
    >>> kafka_record_limit(Topic.kafka("t", bootstrap_servers="k:9092"))
    1000000
    >>> kafka_record_limit(
    ...     Topic.kafka("t", bootstrap_servers="k:9092", **{"kafka.message.max.bytes": "2048"})
    ... )
    2048
    """
    opts = topic.option_dict()
    # message.max.bytes for librdkafka (kspark's own client), max.request.size for the Java
    # producer of Spark's Kafka connector: the smaller one given wins
    given = [o for o in ("kafka.message.max.bytes", "kafka.max.request.size") if o in opts]
    limits = []
    for option in given:
        raw = opts[option]
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise errors.ConfigError(
                f"topic {topic.name!r}: {option} must be a positive number of bytes, not {raw!r}",
                option=option,
            )
        limits.append(value)
    return min(limits, default=KAFKA_MAX_MESSAGE_BYTES)


def known_type(tp: TypeDesc | None) -> TypeDesc:
    """A key or value type; one that nothing declares is dynamic."""
    return DYNAMIC if tp is None else tp


def bound_topic(node: n.Source | n.TableSource | n.Sink) -> n.TopicSpec:
    if node.topic is None:
        raise CompilationError(
            f"{node.name}: topic {node.topic_name!r} is not bound; StreamsApp binds the "
            "topology's names (kspark.bindings.bind_topology) before it compiles",
            processor=node.name,
        )
    return node.topic


def check_destinations(parts: list[st.SinkPart], dlq: sp.TopicRef | None) -> None:
    """Sinks into one topic are written together (``kspark_server.sinks``), so they must
    agree on its format and types; the dead-letter queue, whose records have other columns,
    needs a topic of its own."""
    first: dict[tuple[str, ...], st.SinkPart] = {}
    for part in parts:
        ref = topic_ref(part.topic)
        other = first.setdefault(ref.destination, part)
        if other is part:
            continue
        same_types = (
            other.stage.key_type.spark_json() == part.stage.key_type.spark_json()
            and other.stage.value_type.spark_json() == part.stage.value_type.spark_json()
        )
        if other.topic.format != part.topic.format or not same_types:
            raise InvalidTopologyError(
                f"sinks {other.processor} and {part.processor} write into the same topic "
                f"({ref.path or ref.name}) with different formats or key/value types; their "
                "records are written together, so give them one format and the same types, "
                "or separate topics",
                sinks=[other.processor, part.processor],
            )
    if dlq is not None and dlq.destination in first:
        sink = first[dlq.destination]
        raise errors.ConfigError(
            f"dead_letter_queue_topic writes into the same topic ({dlq.path or dlq.name}) as "
            f"sink {sink.processor}; dead-letter records have other columns than the app's "
            "records, so give the dead-letter queue a topic of its own",
            option="dead_letter_queue_topic",
        )


def topic_ref(topic: n.TopicSpec) -> sp.TopicRef:
    return sp.TopicRef(name=topic.name, format=topic.format, path=topic.path, options=topic.options)


def store_spec(d: StoreDef) -> sp.StoreSpec:
    return sp.StoreSpec(
        name=d.name,
        kind=d.kind,
        key=d.key_type.spec(),
        value=d.value_type.spec(),
        logging=d.logging,
        history_retention_ms=d.history_retention_ms,
        retention_ms=d.retention_ms,
        window_size_ms=d.window_size_ms,
        retain_duplicates=d.retain_duplicates,
    )


def key_value(key: TypeDesc, value: TypeDesc) -> sp.KeyValue:
    return sp.KeyValue(key=key.spec(), value=value.spec())


def envelope_json(key: TypeDesc, value: TypeDesc, extra: list[dict[str, Any]] | None = None) -> str:
    """The envelope's Spark schema as JSON (``StructType.fromJson`` reads it)."""
    return env.envelope_json(key.spark_json(), value.spark_json(), extra or ())


def read_schema(topic: n.TopicSpec, key: TypeDesc, value: TypeDesc, processor: str) -> str | None:
    if topic.format in ("kafka", "table"):
        return None
    if topic.layout == "envelope":
        internal = topic.option_dict().get("kspark.internal") == "true"
        fields = env.stored_fields(key.spark_json(), value.spark_json(), internal)
    else:
        if not isinstance(value, Record):
            raise InvalidTopologyError(
                f"{processor}: layout='value' needs a dataclass or attrs value type, "
                f"not {value.display()}",
                processor=processor,
            )
        names = {f.name for f in value.fields}
        for what, fld in (
            ("key_field", topic.key_field),
            ("timestamp_field", topic.timestamp_field),
        ):
            if fld is not None and fld not in names:
                raise InvalidTopologyError(
                    f"{processor}: {what} {fld!r} is not a field of {value.display()}",
                    processor=processor,
                )
        if topic.key_field is not None:
            kf = next(f for f in value.fields if f.name == topic.key_field)
            if kf.type != key and not isinstance(key, Primitive):
                raise InvalidTopologyError(
                    f"{processor}: key_field {topic.key_field!r} has type {kf.type.display()}, "
                    f"but key_type is {key.display()}",
                    processor=processor,
                )
        fields = [env.field(f.name, f.type.spark_json()) for f in value.fields]
    if topic.format in ("jsonl", "csv"):  # lines that do not parse go to the handler
        fields.append(env.field("_corrupt_record", "string"))
    return env.struct_json(fields)
