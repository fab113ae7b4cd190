"""The specs of the sinks: the union of an app's sinks written once per batch
(:class:`SinksSpec`), and the topics that records name at run time (:class:`TopicRule`,
:class:`TopicNameSpec`, :class:`DynamicSinkSpec`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from kspark_server.contract.parts import OperatorFields, TopicRef
from kspark_server.contract.valuetypes import KeyValue
from kspark_server.contract.version import SPEC_VERSION, Fn

__all__ = ["DynamicSinkSpec", "SinkSpec", "SinksSpec", "TopicNameSpec", "TopicRule"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkSpec:
    """Sink ``index`` of the app: columns ``k<index>``/``v<index>`` of the union."""

    index: int
    topic: TopicRef
    num_partitions: int
    #: the sink's rows reach the writer in the order a stateful operator's task processed
    #: them (deduplication's), which the writer keeps, as Kafka Streams produces records;
    #: otherwise the writer sorts them by source position
    emitted_order: bool = False


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
class TopicNameSpec(OperatorFields):
    """``to(topic_extractor)``: puts into each record's ``topic`` column the topic that
    ``extractor(key, value, record_context)`` names; a failing extractor goes to the
    processing handler, a name that ``rule`` does not bind to the production handler."""

    kind: ClassVar[str] = "topic_name"
    input: KeyValue
    extractor: Fn
    rule: TopicRule


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
    #: a test's fault: at this batch the writer fails once, after writing the batch's
    #: internal topics and before the batch commits (-1: never)
    fail_after_internal: int = -1
