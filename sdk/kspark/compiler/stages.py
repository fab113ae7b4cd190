"""The physical stages the compiler lowers a topology to.

A stage is what becomes one or a few Spark DataFrame operations. Stages hold the operator
specs that ``kspark_server`` runs, so plan-only tests can check fusion, specs and source
options with no Spark server.
"""

from __future__ import annotations

import attrs

from kspark._typing import KafkaClient, TimestampPolicy
from kspark.plan import graph
from kspark.plan.nodes import TopicSpec
from kspark.plan.types import TypeDesc
from kspark_server.spec import (
    ChainSpec,
    DedupIdSpec,
    DedupSpec,
    JoinKeySpec,
    SinksSpec,
    StatefulSpec,
    TopicNameSpec,
)


@attrs.frozen(kw_only=True, eq=False)
class Stage:
    key_type: TypeDesc
    value_type: TypeDesc

    @property
    def inputs(self) -> tuple[Stage, ...]:
        return ()


@attrs.frozen(kw_only=True, eq=False)
class _OneInput(Stage):
    """A stage of one input stage."""

    input: Stage

    @property
    def inputs(self) -> tuple[Stage, ...]:
        return (self.input,)


@attrs.frozen(kw_only=True, eq=False)
class Read(Stage):
    """Read a topic into envelope form."""

    topic: TopicSpec
    processor: str
    #: the Spark schema (JSON) the source is read with
    read_schema: str | None
    max_files_per_trigger: int | None = None
    #: what to do with records that do not parse: ``fail``, ``continue`` or ``dlq``
    deserialization: str = "fail"
    subtopology: int = 0
    #: Kafka topics: ``auto``, ``jvm`` or ``python`` (StreamsConfig.kafka_client)
    kafka_client: KafkaClient = "auto"
    #: records with a null or negative timestamp (StreamsConfig.timestamp_policy)
    timestamp_policy: TimestampPolicy = "fail"
    #: skipped records go to the dead-letter queue too (dead_letter_dropped_records)
    dead_letter_dropped: bool = False
    #: which of its source's topics this read is (``stream(["a", "b"])``: 0, 1)
    part: int = 0


@attrs.frozen(kw_only=True, eq=False)
class Chain(_OneInput):
    """A fused run of stateless steps: one ``mapInArrow`` pass."""

    spec: ChainSpec


@attrs.frozen(kw_only=True, eq=False)
class SqlFilter(_OneInput):
    """``filter_expr``: a Spark SQL condition evaluated in the JVM, no Python pass."""

    processor: str
    condition: str
    #: the columns the condition sees: ``(name, source)``, where the source is an
    #: envelope column (``key``, ``timestamp``, ``value``) or ``value.<field>``
    scope: tuple[tuple[str, str], ...]


@attrs.frozen(kw_only=True, eq=False)
class IdStage(_OneInput):
    """Adds ``ks_id`` for ``deduplicate``'s repartition by id."""

    spec: DedupIdSpec


@attrs.frozen(kw_only=True, eq=False)
class JoinKeyStage(_OneInput):
    """Adds ``ks_gkey``, the table key a global-table join looks each record up by."""

    spec: JoinKeySpec


@attrs.frozen(kw_only=True, eq=False)
class TopicNameStage(_OneInput):
    """Puts into each record's ``topic`` column the topic its sink's extractor names."""

    spec: TopicNameSpec


@attrs.frozen(kw_only=True, eq=False)
class Union(Stage):
    parts: tuple[Stage, ...]

    @property
    def inputs(self) -> tuple[Stage, ...]:
        return self.parts


@attrs.frozen(kw_only=True, eq=False)
class Cogroup(Stage):
    """The records of a cogrouped aggregation's grouped streams in one stream, each
    tagged with its input in ``ks_input``: input 0's value in ``value``, input ``j``'s in
    ``ks_value<j>`` (each part keeps its own value type). ``value_type`` is input 0's."""

    parts: tuple[Stage, ...]

    @property
    def inputs(self) -> tuple[Stage, ...]:
        return self.parts


@attrs.frozen(kw_only=True, eq=False)
class Shuffle(_OneInput):
    """Redistribute records by key hash over ``num_partitions``."""

    num_partitions: int


@attrs.frozen(kw_only=True, eq=False)
class Stateful(Stage):
    """A per-task operator (``applyInPandasWithState`` grouped by ``ks_task``).

    ``table`` is the second input of a stream-table join. ``task_column`` is the column
    hashed into tasks: ``key``, ``ks_id`` for ``deduplicate``, or ``ks_gkey`` for a
    global-table join. With ``broadcast_table`` (a processor's global store), each of
    ``table``'s records goes to every task, its key in ``ks_gkey``.
    """

    stream: Stage
    table: Stage | None
    spec: StatefulSpec
    num_partitions: int
    task_column: str = "key"
    broadcast_table: bool = False

    @property
    def inputs(self) -> tuple[Stage, ...]:
        return (self.stream,) if self.table is None else (self.stream, self.table)


@attrs.frozen(kw_only=True, eq=False)
class SinkPart:
    index: int
    processor: str
    topic: TopicSpec
    stage: Stage


@attrs.frozen(kw_only=True, eq=False)
class DynamicSinkPart:
    """A sink whose records name their topics (``to(topic_extractor)``): its rows are in
    columns ``k<index>``/``v<index>`` of the union, each with its topic in ``topic``."""

    index: int
    processor: str
    stage: Stage


@attrs.frozen(kw_only=True, eq=False)
class Output:
    """The whole app: its sinks' stages and the ``foreachBatch`` writer spec."""

    sinks: tuple[SinkPart, ...]
    writer_spec: SinksSpec
    stores: dict[str, str]
    #: The last stages of branches that reach no sink (the topology's ``ends``: ``foreach``,
    #: ``print``, ``peek``, ...): they run, and only their side rows (drops, dead letters,
    #: metrics) leave them.
    ends: tuple[Stage, ...] = ()
    #: The sinks whose records name their topics (``to(topic_extractor)``), numbered after
    #: :attr:`sinks`.
    dynamic: tuple[DynamicSinkPart, ...] = ()

    def roots(self) -> tuple[Stage, ...]:
        """The stages the app's query unions: the sinks', the dynamic sinks', the ends'."""
        return (
            *(part.stage for part in self.sinks),
            *(part.stage for part in self.dynamic),
            *self.ends,
        )

    def stages(self) -> list[Stage]:
        """All stages, inputs first, each once."""
        return graph.toposort(self.roots(), _inputs)


def _inputs(stage: Stage) -> tuple[Stage, ...]:
    return stage.inputs


#: Stages that keep the order of their input's rows within each Spark partition: one pass
#: per record (``mapInArrow``, a filter, added columns), no shuffle.
_PER_RECORD = (Chain, SqlFilter, IdStage, JoinKeyStage, TopicNameStage)


def in_emitted_order(stage: Stage) -> bool:
    """Whether ``stage``'s rows reach the writer in the order a stateful operator's task
    processed them, which the writer then keeps: they leave deduplication, which forwards
    its task's records in processing order, through per-record stages only (a
    :class:`Union` of such stages keeps each part's Spark partitions apart).

    Other rows are sorted by source position: rows read from a topic (or shuffled) come in
    a Spark task's read order, which is not the topic's, and the other operators place
    their outputs by the positions they give them (``ks_seq``, ``ks_sub``).

    Examples
    --------
    >>> from kspark.plan.types import describe_type
    >>> t = describe_type(str)
    >>> read = Stage(key_type=t, value_type=t)
    >>> in_emitted_order(Shuffle(key_type=t, value_type=t, input=read, num_partitions=2))
    False
    """
    while isinstance(stage, _PER_RECORD):
        stage = stage.input
    if isinstance(stage, Union):
        return all(in_emitted_order(p) for p in stage.parts)
    return isinstance(stage, Stateful) and isinstance(stage.spec, DedupSpec)
