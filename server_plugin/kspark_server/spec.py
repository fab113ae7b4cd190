"""The operator specs: the typed contract between kspark's compiler and the operators.

The compiler builds one spec per operator (:data:`OperatorSpec`); the spec travels to the
workers inside the pickled operator function, and the operator reads its fields. Specs are
frozen and check themselves when built, so an operator never meets a malformed one.

- type specs (:data:`TypeSpec`) say how a key or value column becomes a Python object
  and back (:mod:`kspark_server.codec`);
- a chain's steps are a tagged union (:data:`Step`): the class is the tag;
- every operator spec carries the :data:`SPEC_VERSION` it was written with, and
  :func:`check_spec` refuses another version.

They are standard-library dataclasses, not attrs classes: this package runs in workers
that need nothing installed besides pyarrow and pandas (docs/deployment.md).

Examples
--------
>>> t = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
>>> step = MapValuesStep(processor="KSTREAM-MAPVALUES-0000000001", fn=abs, with_key=False)
>>> spec = ChainSpec(input=t, output=t, steps=(step,), output_schema="{}")
>>> check_spec(spec).kind
'chain'
>>> check_spec(dataclasses.replace(spec, spec_version=0))
Traceback (most recent call last):
...
kspark_server.spec.SpecError: operator spec version 0 is not supported by this kspark_server (supports 13); use the same kspark version on client and server
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, get_args

from kspark_server.handlers import Handler
from kspark_server.paths import normalize_path

__all__ = [
    "SPEC_VERSION",
    "STATEFUL_RUNNERS",
    "AggregateSpec",
    "ArrowValues",
    "BranchStep",
    "ChainSpec",
    "Change",
    "CogroupInput",
    "DedupIdSpec",
    "DedupSpec",
    "DynamicSinkSpec",
    "FilterStep",
    "FkMatchSpec",
    "FkResolveSpec",
    "FkSubscribeSpec",
    "FlatMapStep",
    "FlatMapValuesStep",
    "ForeachStep",
    "GlobalStoreSpec",
    "Handling",
    "JoinKeySpec",
    "JoinSpec",
    "JsonSpec",
    "KeyValue",
    "ListSpec",
    "MapSpec",
    "MapStep",
    "MapValuesStep",
    "OperatorSpec",
    "Packed",
    "PeekStep",
    "PrimSpec",
    "ProcessorSpec",
    "RecordLimit",
    "RecordSpec",
    "SelectKeyStep",
    "SinkSpec",
    "SinksSpec",
    "SpecError",
    "StateOptions",
    "StatefulSpec",
    "Step",
    "StoreSpec",
    "SuppressSpec",
    "TableFilterStep",
    "TableGroupBySpec",
    "TableJoinSpec",
    "TableMapValuesStep",
    "TopicNameSpec",
    "TopicRef",
    "TopicRule",
    "TypeSpec",
    "WindowJoinSpec",
    "check_spec",
]

#: The version of this contract; a client and the operators it runs must agree on it.
#: 5: dynamic keys and values (:class:`JsonSpec`); 6: vectorized steps; 7: chains that
#: feed Kafka sinks check record sizes (:class:`RecordLimit`) and name the step whose
#: type a value must fit (``ChainSpec.converts_for``); 8: stateful operators take their
#: state's tuning and checks from the spec (:class:`StateOptions`); 9: ``foreach`` steps,
#: and sinks whose topic each record names (:class:`TopicNameSpec`,
#: :class:`DynamicSinkSpec`); 10: global-table joins (:class:`JoinKeySpec`,
#: ``JoinSpec.global_table``); 11: foreign-key joins (:class:`FkSubscribeSpec`,
#: :class:`FkMatchSpec`, :class:`FkResolveSpec`) and re-grouped tables
#: (:class:`TableGroupBySpec`, ``AggregateSpec.table`` and ``subtractor``); 12:
#: time-limited suppression (:class:`SuppressSpec`), cogrouped aggregations
#: (``AggregateSpec.cogroup``, :class:`CogroupInput`), sliding windows
#: (``AggregateSpec.sliding``) and windowed stores' retention (``AggregateSpec.retention_ms``),
#: and global stores of processors (:class:`GlobalStoreSpec`, ``ProcessorSpec.global_store``);
#: 13: local stores are kept per application (``StateOptions.application_id``) and reused
#: across restarts.
SPEC_VERSION = 13

Fn = Callable[..., Any]


class SpecError(ValueError):
    """The client sent a spec this server package cannot run."""


# -- type specs ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrimSpec:
    """A primitive: ``spark`` is its Spark type name (``long``, ``decimal(38,18)``...)."""

    spark: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListSpec:
    """A list of ``element``."""

    element: TypeSpec

    def __post_init__(self) -> None:
        _check_type(self.element, "list element")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapSpec:
    """A dict of ``key`` to ``value``."""

    key: TypeSpec
    value: TypeSpec

    def __post_init__(self) -> None:
        _check_type(self.key, "map key")
        _check_type(self.value, "map value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordSpec:
    """A dataclass or attrs class: ``fields`` are ``(attribute name, type spec)``."""

    cls: type
    fields: tuple[tuple[str, TypeSpec], ...]

    def __post_init__(self) -> None:
        for name, t in self.fields:
            _check_type(t, f"{self.cls.__qualname__}.{name}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JsonSpec:
    """A dynamic value: any JSON-compatible Python value (None, bool, int, float, str, list,
    dict), carried as JSON text in a Spark ``string`` column. ``shape`` is ``any``, or
    ``dict`` or ``list`` when declared as such."""

    shape: str = "any"

    def __post_init__(self) -> None:
        if self.shape not in ("any", "dict", "list"):
            raise SpecError(f"unknown dynamic shape {self.shape!r}")


TypeSpec = PrimSpec | ListSpec | MapSpec | RecordSpec | JsonSpec


def _check_type(t: object, where: str) -> None:
    if not isinstance(t, TypeSpec):
        raise SpecError(f"{where}: not a type spec: {t!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyValue:
    """The key and value types of a stream."""

    key: TypeSpec
    value: TypeSpec

    def __post_init__(self) -> None:
        _check_type(self.key, "key")
        _check_type(self.value, "value")


# -- chain steps (a tagged union: the class is the tag) ------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrowValues:
    """The values of a vectorized step, which take and give whole Arrow columns: their
    type before the step and after it, each as a type spec and as its Spark type in JSON
    (the Arrow type comes from it)."""

    before: TypeSpec
    before_spark: str
    after: TypeSpec
    after_spark: str

    def __post_init__(self) -> None:
        _check_type(self.before, "vectorized step input")
        _check_type(self.after, "vectorized step output")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FnStep:
    """A step of processor ``processor`` that calls the user's ``fn``; ``op`` is its tag."""

    op: ClassVar[str]
    processor: str
    fn: Fn


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterStep(_FnStep):
    """``fn(key, value)``, or with ``vectorized`` ``fn(values)`` over a whole column."""

    op = "filter"
    negate: bool
    vectorized: ArrowValues | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapStep(_FnStep):
    op = "map"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapValuesStep(_FnStep):
    """``fn(value)`` or ``fn(key, value)``, or with ``vectorized`` ``fn(values)`` over a
    whole column."""

    op = "map_values"
    with_key: bool
    vectorized: ArrowValues | None = None

    def __post_init__(self) -> None:
        if self.vectorized is not None and self.with_key:
            raise SpecError(f"{self.processor}: a vectorized mapper takes the values only")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatMapStep(_FnStep):
    op = "flat_map"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatMapValuesStep(_FnStep):
    op = "flat_map_values"
    with_key: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectKeyStep(_FnStep):
    op = "select_key"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeekStep(_FnStep):
    op = "peek"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForeachStep(_FnStep):
    """``fn(key, value)`` for each record, which then ends there (``foreach``, ``print``)."""

    op = "foreach"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BranchStep:
    """Keeps the records whose first true predicate is ``index`` (or none, for the default
    branch, whose ``index`` is ``len(predicates)``)."""

    op: ClassVar[str] = "branch"
    processor: str
    predicates: tuple[Fn, ...]
    index: int
    #: the split's processor (``KSTREAM-BRANCH-...``), which a failing predicate names:
    #: every branch evaluates the same predicates, and the failure is handled once
    split: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableFilterStep(_FnStep):
    op = "table_filter"
    negate: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableMapValuesStep(_FnStep):
    op = "table_map_values"
    with_key: bool


Step = (
    FilterStep
    | MapStep
    | MapValuesStep
    | FlatMapStep
    | FlatMapValuesStep
    | SelectKeyStep
    | PeekStep
    | ForeachStep
    | BranchStep
    | TableFilterStep
    | TableMapValuesStep
)

_STEPS: tuple[type, ...] = get_args(Step)


# -- parts of operator specs --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Handling:
    """The exception handlers and where they run (the task ids in their contexts)."""

    processing: Handler | None = None
    production: Handler | None = None
    subtopology: int = 0
    num_partitions: int = 1
    #: records an operator drops by its rules (a null key, an expired put...) also go to
    #: the dead-letter queue (``StreamsConfig.dead_letter_dropped_records``)
    dead_letter_dropped: bool = False
    #: the built-in deserialization handler's mode, for values whose class refuses them
    #: when they are decoded in a worker: ``fail``, ``continue`` or ``dlq``
    deserialization: str = "fail"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordLimit:
    """The byte limit of the Kafka topic a chain feeds (``kspark_server.recordsize``): a
    record over it goes to the production handler under the sink's name."""

    processor: str
    topic: str
    max_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Packed:
    """Which values travel through a stateful operator as JSON text (the stream's value,
    the table's value, the output value); see ``kspark.plan.types.json_packable``."""

    value: bool = False
    tvalue: bool = False
    out: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopicRef:
    """Where a sink writes: as ``kspark.Topic`` says, without its reading options."""

    name: str
    format: str
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def ordered(self) -> bool:
        """Whether the sink writes one file sorted by position (a test driver's topic)."""
        return dict(self.options).get("kspark.ordered") == "true"

    @property
    def destination(self) -> tuple[str, ...]:
        """What the sink writes into: records of sinks with one destination are written
        together, once per batch, so that neither replaces the other's ``batch_id=N``."""
        if self.format == "kafka":
            servers = dict(self.options).get("kafka.bootstrap.servers", "")
            return ("kafka", servers, self.name)
        if self.format == "table":
            # Spark's catalog compares table names without case by default
            return ("table", (self.path or self.name).lower())
        return ("files", normalize_path(self.path or ""))


# -- operator specs -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChainSpec:
    """A fused run of stateless steps (one ``mapInArrow`` pass)."""

    kind: ClassVar[str] = "chain"
    spec_version: int = SPEC_VERSION
    input: KeyValue
    output: KeyValue
    steps: tuple[Step, ...]
    output_schema: str
    handling: Handling = Handling()
    #: the processor a chain without steps converts dynamic keys for (a join): a key that
    #: does not convert is that processor's failure (its processing handler)
    converts_for: str | None = None
    #: the chain feeds a Kafka sink: records over its byte limit go to the production
    #: handler (``kspark_server.recordsize``)
    record_limit: RecordLimit | None = None
    #: the sink a chain without steps converts dynamic records for (a sink topic with
    #: declared types): a record that does not convert is the sink's production failure
    sink: str | None = None

    def __post_init__(self) -> None:
        for step in self.steps:
            if not isinstance(step, _STEPS):
                raise SpecError(f"unknown step op {getattr(step, 'op', type(step).__name__)!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupIdSpec:
    """Adds ``ks_id`` (the dedup id) to each record, for ``deduplicate``'s repartition."""

    kind: ClassVar[str] = "dedup_id"
    spec_version: int = SPEC_VERSION
    processor: str
    input: KeyValue
    id_selector: Fn
    output_schema: str
    handling: Handling = Handling()


@dataclasses.dataclass(frozen=True, kw_only=True)
class JoinKeySpec:
    """Adds ``ks_gkey`` to each stream record of a global-table join: the table key that
    ``key_selector(key, value)`` gives, as ``table_key`` encodes it, so the record goes to
    the task of that key (None for a record with a null value, which the join drops)."""

    kind: ClassVar[str] = "join_key"
    spec_version: int = SPEC_VERSION
    processor: str
    input: KeyValue
    key_selector: Fn
    table_key: TypeSpec
    output_schema: str
    handling: Handling = Handling()


#: The Spark APIs a stateful operator can run under (``StreamsConfig.stateful_runner``).
STATEFUL_RUNNERS = ("transform_with_state", "apply_in_pandas")

#: The size of a base chunk of a task's durable state (``StreamsConfig``'s
#: ``state_base_chunk_bytes``; :mod:`kspark_server.taskstate`).
BASE_CHUNK_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateOptions:
    """How a stateful operator keeps its task state (``StreamsConfig``'s
    ``state_base_chunk_bytes`` and ``state_check_log``).

    ``base_chunk_bytes``: a base chunk holds keys until its pairs pass this many bytes.
    ``check_log``: after each batch, read the durable base and log back and compare them
    with the task state (slow: for tests); changes are then logged against bases of any
    size, so that small states take the log path too.
    """

    base_chunk_bytes: int = BASE_CHUNK_BYTES
    check_log: bool = False
    #: which Spark API runs the operator (``StreamsConfig``'s ``stateful_runner``)
    runner: str = "transform_with_state"
    #: where the executors keep the tasks' local stores (``StreamsConfig``'s
    #: ``state_dir``; empty: :func:`kspark_server.localstore.root_dir`)
    local_dir: str = ""
    #: the application whose local stores these are: they live in
    #: ``<local_dir>/<application_id>`` (:func:`kspark_server.localstore.app_dir`), apart
    #: from other apps' and where clean-up finds them
    application_id: str = ""

    def __post_init__(self) -> None:
        if self.base_chunk_bytes <= 0:
            raise SpecError(f"base_chunk_bytes must be positive, got {self.base_chunk_bytes}")
        if self.runner not in STATEFUL_RUNNERS:
            raise SpecError(f"runner must be one of {STATEFUL_RUNNERS}, got {self.runner!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupSpec:
    """KIP-655 deduplication, per task."""

    kind: ClassVar[str] = "dedup"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    #: ``by_key``, ``by_key_value`` (by ``id_selector``) or ``by_id`` (by the ``ks_id``
    #: column of a :class:`DedupIdSpec` stage)
    mode: str
    interval_ms: int
    id_selector: Fn | None
    input: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("by_key", "by_key_value", "by_id"):
            raise SpecError(f"{self.processor}: unknown deduplication mode {self.mode!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JoinSpec:
    """A stream-table join, per task; the table is versioned or keeps latest values."""

    kind: ClassVar[str] = "join"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    left: bool
    versioned: bool
    history_retention_ms: int
    grace_ms: int
    joiner: Fn
    joiner_with_key: bool
    stream: KeyValue
    table: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    #: a global-table join: every record's table key is in ``ks_gkey`` (a stream
    #: record's from its key selector, a table update's its own key), and ``key`` is the
    #: stream record's own key, which the output keeps
    global_table: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowJoinSpec:
    """A windowed stream-stream join, per task (:mod:`kspark_server.operators.window_join`).

    ``mode`` is ``inner``, ``left`` or ``outer``. A left record at ``t1`` joins a right
    record at ``t2`` when ``t1 - before_ms <= t2 <= t1 + after_ms``; a record is late once
    the task's stream time passes its window's end plus ``grace_ms``. The right stream's
    values travel in ``ks_tvalue`` (``packed.tvalue``), as a stream-table join's table.
    """

    kind: ClassVar[str] = "windowjoin"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    mode: str
    before_ms: int
    after_ms: int
    grace_ms: int
    joiner: Fn
    joiner_with_key: bool
    left: KeyValue
    right: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left", "outer"):
            raise SpecError(f"{self.processor}: unknown stream-stream join mode {self.mode!r}")
        if self.before_ms + self.after_ms < 0 or self.grace_ms < 0:
            raise SpecError(f"{self.processor}: invalid join windows")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableJoinSpec:
    """A same-key table-table join, per task (:mod:`kspark_server.operators.table_join`).

    ``mode`` is ``inner``, ``left`` or ``outer``. Both tables' updates arrive in one input,
    the right table's tagged ``ks_jside == 1`` with their value in ``ks_tvalue``; the
    operator keeps each key's latest value of both sides and of the result, and emits the
    result's changes (None: a tombstone).
    """

    kind: ClassVar[str] = "tablejoin"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    mode: str
    joiner: Fn
    joiner_with_key: bool
    left: KeyValue
    right: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left", "outer"):
            raise SpecError(f"{self.processor}: unknown table-table join mode {self.mode!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkSubscribeSpec:
    """The first stage of a foreign-key table-table join, keyed by the left table's key
    (:mod:`kspark_server.operators.fk_subscribe`).

    Keeps each left key's foreign key and a version number, and sends subscription
    messages (``output.value``: MessagePack bytes) keyed by the foreign key (``fk``, the
    right table's key type): subscribe, unsubscribe, delete.
    """

    kind: ClassVar[str] = "fksubscribe"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    extractor: Fn
    extractor_with_key: bool
    left: KeyValue
    fk: TypeSpec
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkMatchSpec:
    """The second stage of a foreign-key join, keyed by the foreign key
    (:mod:`kspark_server.operators.fk_match`): the subscriptions (``stream``, side 0) and
    the right table's updates (side 1, their value in ``ks_tvalue``). Keeps the right
    table's values and each foreign key's subscribers, and answers each subscription and
    each right update with responses keyed by the left key (``output.value``: bytes)."""

    kind: ClassVar[str] = "fkmatch"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    stream: KeyValue
    right: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkResolveSpec:
    """The last stage of a foreign-key join, keyed by the left key
    (:mod:`kspark_server.operators.fk_resolve`): takes the responses of the newest
    version of each left key only, calls the joiner and keeps the result, which
    ``app.store(name)`` answers.

    ``mode`` is ``inner`` or ``left``; ``key``, ``left_value`` and ``right_value`` are
    the types the joiner's arguments decode to, the values having travelled as JSON text
    where ``left_packed`` / ``right_packed``.
    """

    kind: ClassVar[str] = "fkresolve"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    mode: str
    joiner: Fn
    joiner_with_key: bool
    key: TypeSpec
    left_value: TypeSpec
    right_value: TypeSpec
    left_packed: bool
    right_packed: bool
    input: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left"):
            raise SpecError(f"{self.processor}: unknown foreign-key join mode {self.mode!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkSpec:
    """Sink ``index`` of the app: columns ``k<index>``/``v<index>`` of the union."""

    index: int
    topic: TopicRef
    num_partitions: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopicRule:
    """How a topic name that a record picks at run time is bound, as the app binds the
    names its topology gives: ``explicit`` topics by name first, then ``default`` (its
    ``name`` is a placeholder): a Kafka topic of the name on its cluster, or for files the
    folder ``<default.path>/<name>``. A name neither binds is unbound."""

    explicit: tuple[TopicRef, ...] = ()
    default: TopicRef | None = None

    def resolve(self, name: str) -> TopicRef | None:
        """Where records for topic ``name`` go, or None if the name is unbound.

        >>> rule = TopicRule(default=TopicRef(name="*", format="jsonl", path="/data"))
        >>> rule.resolve("eu").path
        '/data/eu'
        >>> TopicRule().resolve("eu") is None
        True
        """
        for ref in self.explicit:
            if ref.name == name:
                return ref
        if self.default is None or not name or "/" in name or name in (".", ".."):
            return None
        if self.default.format == "kafka":
            return dataclasses.replace(self.default, name=name)
        base = (self.default.path or "").rstrip("/")
        return dataclasses.replace(self.default, name=name, path=f"{base}/{name}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopicNameSpec:
    """``to(topic_extractor)``: puts into each record's ``topic`` column the topic that
    ``extractor(key, value, record_context)`` names; a failing extractor goes to the
    processing handler, a name that ``rule`` does not bind to the production handler."""

    kind: ClassVar[str] = "topic_name"
    spec_version: int = SPEC_VERSION
    processor: str
    input: KeyValue
    extractor: Fn
    rule: TopicRule
    output_schema: str
    handling: Handling = Handling()


@dataclasses.dataclass(frozen=True, kw_only=True)
class DynamicSinkSpec:
    """Sink ``index`` of the app, whose records name their topic (``topic`` column)."""

    index: int
    rule: TopicRule
    num_partitions: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinksSpec:
    """The ``foreachBatch`` writer: routes each batch to the sinks and the DLQ.

    ``kafka_format`` (the JVM connector ``kafka`` or kspark's ``kspark_kafka``) and
    ``batch_offset`` (a rescaled app's batches go on counting) are set when the query
    starts.
    """

    kind: ClassVar[str] = "sinks"
    spec_version: int = SPEC_VERSION
    sinks: tuple[SinkSpec, ...] = ()
    #: sinks whose records name their topics (``to(topic_extractor)``)
    dynamic: tuple[DynamicSinkSpec, ...] = ()
    #: the app has processors that end a stream without a sink (``foreach``, ``print``,
    #: ``peek``, ...): every batch is computed even where no sink reads it
    ends: bool = False
    dlq: TopicRef | None = None
    kafka_client: str = "auto"
    kafka_format: str = "kafka"
    batch_offset: int = 0
    #: the app's checkpoint directory, where the writer keeps the run's lease
    #: (:mod:`kspark_server.lease`), the run's token, and the app's id; set when the
    #: query starts (no lease without them)
    lease_checkpoint_dir: str | None = None
    lease_token: str = ""
    application_id: str = ""


@dataclasses.dataclass(frozen=True)
class Change:
    """A grouped table's change as it travels from the re-keying operator to the
    aggregation (Kafka Streams' ``Change``): the value to add to the record's group
    (``new``) and the value to subtract from it (``old``), either None.

    Examples
    --------
    >>> Change(new="EU", old=None)
    Change(new='EU', old=None)
    """

    new: Any
    old: Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableGroupBySpec:
    """``KTable.group_by(selector)``, per task of the source table's key
    (:mod:`kspark_server.operators.table_group_by`): keeps each source key's last
    selected ``(group key, value)`` and turns each update into the :class:`Change` records
    of the groups it leaves and joins. ``output``'s value is the ``Change`` record type."""

    kind: ClassVar[str] = "tablegroupby"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    selector: Fn
    input: KeyValue
    #: the group key and the selected value's types
    selected: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuppressSpec:
    """``KTable.suppress(Suppressed.until_time_limit(...))``, per task of the table's key
    (:mod:`kspark_server.operators.suppress`): each key's latest update waits in a buffer
    until stream time passes the time of the key's oldest buffered update plus
    ``time_limit_ms``. ``max_records`` and ``max_bytes`` bound the buffer (None:
    unbounded); ``when_full`` says what a full buffer does: ``emit`` its oldest updates
    early, or ``shut_down`` the app."""

    kind: ClassVar[str] = "suppress"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    time_limit_ms: int
    max_records: int | None = None
    max_bytes: int | None = None
    when_full: str = "emit"
    input: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.time_limit_ms < 0:
            raise SpecError(f"{self.processor}: the time limit must not be negative")
        for name in ("max_records", "max_bytes"):
            bound = getattr(self, name)
            if bound is not None and bound < 0:
                raise SpecError(f"{self.processor}: {name} must not be negative, got {bound}")
        if self.when_full not in ("emit", "shut_down"):
            raise SpecError(f"{self.processor}: unknown buffer-full strategy {self.when_full!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogroupInput:
    """One grouped stream of a cogrouped aggregation: its values' type and the aggregator
    (``aggregator(key, value, aggregate)``) that folds them into the shared aggregate."""

    value: TypeSpec
    aggregator: Fn

    def __post_init__(self) -> None:
        _check_type(self.value, "cogrouped value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregateSpec:
    """``count``, ``reduce`` or ``aggregate`` of a grouped stream, per task, optionally
    over time windows (``window_size_ms > 0``; ``sliding`` ones too) and with only final
    results per window (``suppress``: ``Suppressed.until_window_closes`` or
    ``EmitStrategy.on_window_close()``); see :mod:`kspark_server.operators.aggregate`."""

    kind: ClassVar[str] = "aggregate"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    #: ``count``, ``reduce`` or ``aggregate``
    op: str
    reducer: Fn | None = None
    initializer: Fn | None = None
    aggregator: Fn | None = None
    input: KeyValue
    output: KeyValue
    #: 0: not windowed
    window_size_ms: int = 0
    window_advance_ms: int = 0
    grace_ms: int = 0
    #: session windows of this inactivity gap (0: none); ``merger`` joins two sessions'
    #: aggregates (``aggregate``)
    session_gap_ms: int = 0
    merger: Fn | None = None
    suppress: bool = False
    #: sliding windows (KIP-450) of ``window_size_ms``, both ends included: one ends at
    #: each record, one starts just after it (``window_advance_ms`` is then the size)
    sliding: bool = False
    #: how long the store keeps a window after its start, closed or not (0: until it
    #: closes; sliding windows: until no record can read it)
    retention_ms: int = 0
    #: the input is a grouped table's changes (values :class:`Change`): ``count``,
    #: ``reduce`` and ``aggregate`` subtract each old value before they add the new one,
    #: with ``subtractor`` (``reduce``: ``subtractor(aggregate, old)``, ``aggregate``:
    #: ``subtractor(key, old, aggregate)``)
    table: bool = False
    subtractor: Fn | None = None
    #: a cogrouped aggregation (KIP-150): its inputs, in order. Record ``i`` of the
    #: operator's input names its grouped stream in column ``ks_input``; input 0's value is
    #: in ``value``, input ``j``'s (``j > 0``) in ``ks_value<j>``. ``aggregator`` and
    #: ``input.value`` are input 0's.
    cogroup: tuple[CogroupInput, ...] = ()
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.cogroup and (
            self.op != "aggregate"
            or self.table
            or self.packed.value
            or self.aggregator is not self.cogroup[0].aggregator
        ):
            raise SpecError(
                f"{self.processor}: a cogrouped aggregation is an aggregate of streams, its "
                "first input's aggregator its own, its values unpacked"
            )
        if self.table and (self.window_size_ms or self.session_gap_ms or self.suppress):
            raise SpecError(f"{self.processor}: a grouped table aggregates without windows")
        if (self.table and self.op != "count") != (self.subtractor is not None):
            raise SpecError(
                f"{self.processor}: a subtractor goes with reduce and aggregate of a grouped table"
            )
        if self.session_gap_ms < 0 or (self.session_gap_ms > 0 and self.window_size_ms > 0):
            raise SpecError(f"{self.processor}: time windows or session windows, not both")
        if self.session_gap_ms > 0 and (
            self.suppress or (self.op == "aggregate") != (self.merger is not None)
        ):
            raise SpecError(
                f"{self.processor}: session windows take a merger with aggregate, and no "
                "suppression"
            )
        if self.op not in ("count", "reduce", "aggregate"):
            raise SpecError(f"{self.processor}: unknown aggregation {self.op!r}")
        if (self.op == "reduce") != (self.reducer is not None):
            raise SpecError(f"{self.processor}: a reducer goes with reduce")
        if (self.op == "aggregate") != (
            self.initializer is not None and self.aggregator is not None
        ):
            raise SpecError(f"{self.processor}: an initializer and aggregator go with aggregate")
        if self.window_size_ms < 0 or (
            self.window_size_ms > 0 and not 0 < self.window_advance_ms <= self.window_size_ms
        ):
            raise SpecError(
                f"{self.processor}: windows need 0 < advance <= size, got size "
                f"{self.window_size_ms} and advance {self.window_advance_ms}"
            )
        if self.retention_ms and (self.retention_ms < 0 or self.window_size_ms == 0):
            raise SpecError(f"{self.processor}: a retention goes with time or sliding windows")
        if self.sliding and (self.window_size_ms == 0 or self.table):
            raise SpecError(f"{self.processor}: sliding windows need a size, and a stream")
        if self.suppress and self.window_size_ms == 0:
            raise SpecError(f"{self.processor}: suppression needs windows")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreSpec:
    """A state store of a user processor: ``kind`` is ``key_value``, ``versioned`` or
    ``window``; ``key`` and ``value`` its types."""

    name: str
    kind: str
    key: TypeSpec
    value: TypeSpec
    logging: bool = True
    history_retention_ms: int = 0
    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("key_value", "versioned", "window"):
            raise SpecError(f"store {self.name}: unknown store kind {self.kind!r}")
        _check_type(self.key, f"store {self.name} key")
        _check_type(self.value, f"store {self.name} value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlobalStoreSpec:
    """A global store a user processor reads (``StreamsBuilder.add_global_store``): its
    name, key and value types, and the processor that applies its topic's records
    (``update_supplier``; None puts each record, and deletes on a null value). The
    topic's records reach every task of the processor (``ks_jside`` 1, the key in
    ``ks_gkey``, the value in ``ks_tvalue``)."""

    name: str
    key: TypeSpec
    value: TypeSpec
    update_supplier: Fn | None = None
    #: the name of the store's source processor (errors of the update processor name it)
    source: str = ""

    def __post_init__(self) -> None:
        _check_type(self.key, f"global store {self.name} key")
        _check_type(self.value, f"global store {self.name} value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessorSpec:
    """A user processor of the Processor API (``KStream.process``), per task
    (:mod:`kspark_server.operators.processor`). ``supplier()`` makes one processor per task and
    micro-batch; ``fixed_key``: a ``FixedKeyProcessor`` (``process_values``). ``store``
    names the task state that holds all of ``stores`` (and the punctuation schedule)."""

    kind: ClassVar[str] = "processor"
    spec_version: int = SPEC_VERSION
    processor: str
    store: str
    supplier: Fn
    fixed_key: bool
    stores: tuple[StoreSpec, ...] = ()
    application_id: str = ""
    input: KeyValue
    output: KeyValue
    output_schema: str
    packed: Packed
    handling: Handling = Handling()
    state: StateOptions = StateOptions()
    global_store: GlobalStoreSpec | None = None
    versioned: ClassVar[bool] = False


StatefulSpec = (
    DedupSpec
    | JoinSpec
    | WindowJoinSpec
    | AggregateSpec
    | TableJoinSpec
    | TableGroupBySpec
    | SuppressSpec
    | FkSubscribeSpec
    | FkMatchSpec
    | FkResolveSpec
    | ProcessorSpec
)
OperatorSpec = (
    ChainSpec
    | DedupIdSpec
    | JoinKeySpec
    | DedupSpec
    | JoinSpec
    | WindowJoinSpec
    | AggregateSpec
    | TableJoinSpec
    | TableGroupBySpec
    | SuppressSpec
    | FkSubscribeSpec
    | FkMatchSpec
    | FkResolveSpec
    | ProcessorSpec
    | SinksSpec
    | TopicNameSpec
)
_OPERATORS: tuple[type, ...] = get_args(OperatorSpec)


_S = TypeVar("_S", bound=OperatorSpec)


def check_spec(spec: _S) -> _S:
    """``spec``, if this package can run it; raise :class:`SpecError` if not."""
    if not isinstance(spec, _OPERATORS):
        kind = getattr(spec, "kind", None)
        raise SpecError(
            f"unknown operator kind {kind!r}"
            if kind is not None
            else f"not an operator spec: {type(spec).__name__}"
        )
    if spec.spec_version != SPEC_VERSION:
        raise SpecError(
            f"operator spec version {spec.spec_version!r} is not supported by this "
            f"kspark_server (supports {SPEC_VERSION}); use the same kspark version on client "
            "and server"
        )
    return spec
