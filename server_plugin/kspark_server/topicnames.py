"""Sinks whose records name their topic: ``KStream.to(topic_extractor)``.

A pass before the sink calls ``topic_extractor(key, value, record_context)`` for each
record and writes the topic it names into the record's ``topic`` column; the batch writer
(:mod:`kspark_server.sinks`) then writes each topic's records where the app binds that
name (:class:`~kspark_server.spec.TopicRule`). As in Kafka Streams, an extractor that
raises is a processing failure of the sink (the processing exception handler), and a
topic that cannot be produced to, here a name the app does not bind, is a production
failure (the production exception handler).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from kspark_server import codec, handling
from kspark_server.envelope import RecordContext
from kspark_server.spec import TopicNameSpec, check_spec

__all__ = ["RecordContext", "UnboundTopicName", "make_topic_name_stage"]


class UnboundTopicName(LookupError):
    """A topic name extractor named a topic that the app does not bind."""


def _context(row: dict[str, Any]) -> RecordContext:
    headers = tuple((h["key"], h["value"]) for h in row.get("headers") or ())
    return RecordContext(
        topic=row.get("topic"),
        partition=row.get("partition"),
        offset=row.get("offset"),
        timestamp=row.get("timestamp"),
        headers=headers,
    )


def make_topic_name_stage(
    spec: TopicNameSpec,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that names each record's topic (see the module)."""
    check_spec(spec)
    guard = handling.Guard(spec.handling, handling.json_columns(spec))
    kdec = codec.decoder(spec.input.key)
    vdec = codec.decoder(spec.input.value)
    extractor, name, rule = spec.extractor, spec.processor, spec.rule
    bound: dict[str, bool] = {}

    def each(row: dict[str, Any]) -> bool:
        if row["ks_side"] is None:
            kv = guard.decode(name, kdec, vdec, row)
            if kv is None:
                return False
            ok, topic = guard.call(name, extractor, (*kv, _context(row)), row, kv)
            if not ok:
                return False
            if not isinstance(topic, str) or not bound.setdefault(
                topic, rule.resolve(topic) is not None
            ):
                unbound = UnboundTopicName(
                    f"{name}: the topic name extractor named topic {topic!r}, which "
                    "the app does not bind; bind it in StreamsConfig(topics=...), or "
                    "give the app bootstrap_servers or data_dir to bind every name"
                )
                guard.on_error(name, kv, row, unbound, kind="production")
                return False
            row["topic"] = topic
        return True

    return handling.record_stage(guard, spec.output_schema, each)
