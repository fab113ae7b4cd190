"""The compiler: a visitor from plan nodes to physical stages.

Runs of stateless steps are fused into one :class:`~kspark.compiler.stages.Chain` (one
Python pass per record, not one UDF per step). Stateful operators become per-task
:class:`~kspark.compiler.stages.Stateful` stages. A node type without a ``visit_<Node>``
rule fails loudly.

The rules of each kind of node live in :mod:`kspark.compiler.rules`; this module puts them
together into one compiler and adds the sinks, which close the topology.
"""

from __future__ import annotations

from collections.abc import Mapping

from kspark import errors
from kspark.compiler import stages as st
from kspark.compiler.rules.base import Pending
from kspark.compiler.rules.joins import JoinRules
from kspark.compiler.rules.stateful import StatefulRules
from kspark.compiler.rules.stateless import StatelessRules
from kspark.compiler.specs import (
    bound_topic,
    check_destinations,
    envelope_json,
    kafka_record_limit,
    key_value,
    known_type,
    topic_ref,
)
from kspark.config import StreamsConfig
from kspark.errors import CompilationError
from kspark.plan import nodes as n
from kspark.plan.topology import Topology
from kspark.plan.types import Dynamic, TypeDesc
from kspark_server import spec as sp

__all__ = ["compile_topology"]


def compile_topology(
    topology: Topology,
    config: StreamsConfig,
    *,
    sink_types: Mapping[str, tuple[TypeDesc | None, TypeDesc | None]] | None = None,
    subtopology_of: Mapping[str, int] | None = None,
) -> st.Output:
    """Lower ``topology`` to stages for the app configured by ``config``. ``sink_types``
    gives sink topics declared key and value types (the test driver's typed output
    topics): a dynamic key or value is converted to them at the sink, and one that does
    not convert goes to the production handler under the sink's name.
    ``subtopology_of`` numbers the sub-topologies of the named processors (the task ids
    of their dead letters) as another topology does: the uncut topology of a cut one."""
    compiler = _Compiler(topology, config)
    compiler.sink_types = dict(sink_types or {})
    compiler.subtopology_of.update(subtopology_of or {})
    return compiler.compile()


class _Compiler(StatelessRules, JoinRules, StatefulRules):
    """The whole compiler: every node's rule, and the sinks, which close the topology."""

    # -- driver --------------------------------------------------------------------
    def compile(self) -> st.Output:
        # inputs first, so that each visit finds its parents done and the recursion
        # stays one level deep however long the chain of steps is
        for node in self.topology.nodes():
            if not isinstance(node, n.Sink | n.DynamicSink):
                self.visit(node)
        parts = []
        sink_specs = []
        partitions = self.config.num_partitions
        for i, sink in enumerate(self.topology.sinks):
            topic = bound_topic(sink)
            stage = self.sink_stage(sink, topic)
            parts.append(st.SinkPart(index=i, processor=sink.name, topic=topic, stage=stage))
            ref = topic_ref(topic)
            sink_specs.append(
                sp.SinkSpec(
                    index=i,
                    topic=ref,
                    num_partitions=partitions,
                    emitted_order=st.in_emitted_order(stage),
                )
            )
        dynamic_parts, dynamic = self.dynamic_sinks(len(parts))
        dlq = self.config.dead_letter_queue_topic
        dlq_ref = topic_ref(dlq) if dlq is not None else None
        check_destinations(parts, dlq_ref)
        writer = sp.SinksSpec(
            sinks=tuple(sink_specs),
            dynamic=dynamic,
            # ends no sink reads: the writer computes each batch for their actions
            ends=bool(self._side_ends()),
            dlq=dlq_ref,
            kafka_client=self.config.kafka_client,
        )
        return st.Output(
            sinks=tuple(parts),
            writer_spec=writer,
            stores=self.topology.stores(),
            ends=tuple(self.flush(self.visit(end)) for end in self._side_ends()),
            dynamic=dynamic_parts,
        )

    def _side_ends(self) -> tuple[n.Node, ...]:
        """The topology's ends whose records go nowhere (``foreach``, ``print``, ``peek``,
        ...): only their side rows leave them."""
        return tuple(e for e in self.topology.ends if not isinstance(e, n.DynamicSink))

    def dynamic_sinks(
        self, first_index: int
    ) -> tuple[tuple[st.DynamicSinkPart, ...], tuple[sp.DynamicSinkSpec, ...]]:
        """The stages of the sinks whose records name their topics (``to(topic_extractor)``),
        and their writer's specs, their union columns numbered after the sinks' from
        ``first_index``."""
        parts: list[st.DynamicSinkPart] = []
        specs: list[sp.DynamicSinkSpec] = []
        for node in self.topology.ends:
            if not isinstance(node, n.DynamicSink):
                continue
            index = first_index + len(parts)
            stage, rule = self.dynamic_sink(node)
            parts.append(st.DynamicSinkPart(index=index, processor=node.name, stage=stage))
            specs.append(
                sp.DynamicSinkSpec(
                    index=index, rule=rule, num_partitions=self.config.num_partitions
                )
            )
        return tuple(parts), tuple(specs)

    def dynamic_sink(self, node: n.DynamicSink) -> tuple[st.Stage, sp.TopicRule]:
        """The stage that names each record's topic for ``node``, and its binding rule."""
        if not node.bound:
            raise CompilationError(
                f"{node.name}: its topic names are not bound; StreamsApp binds them "
                "(kspark.bindings.bind_topology) before it compiles",
                processor=node.name,
            )
        rule = sp.TopicRule(
            explicit=tuple(topic_ref(t) for t in node.bindings),
            default=topic_ref(node.default) if node.default is not None else None,
        )
        stage = self.stage_of(node.parent, node)
        spec = sp.TopicNameSpec(
            processor=node.name,
            input=key_value(stage.key_type, stage.value_type),
            extractor=node.extractor,
            rule=rule,
            output_schema=envelope_json(stage.key_type, stage.value_type),
            handling=self.handling_at(node),
        )
        named = st.TopicNameStage(
            input=stage, spec=spec, key_type=stage.key_type, value_type=stage.value_type
        )
        return named, rule

    def sink_stage(self, sink: n.Sink, topic: n.TopicSpec) -> st.Stage:
        """What ``sink`` writes. Into Kafka, through a chain that hands each record over
        the topic's byte limit to the production handler (``kspark_server.recordsize``):
        the sink's own chain, or a chain of no steps of its own, never a shared stage."""
        p = self.visit(sink.parent)
        typed = self.typed_sink(sink, p)
        if typed is not None:
            p = self._start(typed, sink)  # the sink's own sub-topology: its parent's
        if topic.format != "kafka":
            return self.flush(p)
        limit = sp.RecordLimit(
            processor=sink.name, topic=topic.name, max_bytes=kafka_record_limit(topic)
        )
        key_type, value_type = known_type(p.key_type), known_type(p.value_type)
        handling = self.handling(p.subtopology)
        return self.chain(p.base, key_type, value_type, handling, p.steps, record_limit=limit)

    def typed_sink(self, sink: n.Sink, p: Pending) -> st.Stage | None:
        """``p`` converted to the types declared for ``sink``'s topic (``sink_types``)
        where its key or value is dynamic; None when nothing is to convert. A record that
        does not convert is the sink's, as a serializer's failure: the production handler."""
        key_type, value_type = self.sink_types.get(sink.topic_name, (None, None))
        have_key, have_value = known_type(p.key_type), known_type(p.value_type)
        if sink.topic is not None:  # a Topic with a schema
            for what, have, schema in (
                ("key_type", have_key, sink.topic.key_type),
                ("value_type", have_value, sink.topic.value_type),
            ):
                if schema is not None and not isinstance(have, Dynamic) and have != schema:
                    raise errors.ConfigError(
                        f"{sink.name}: topic {sink.topic_name!r} declares {what}="
                        f"{schema.display()}, but the records written to it have "
                        f"{what}={have.display()}; convert them before the sink "
                        "(map_values(...)) or declare the topic's type as theirs",
                        option="topics",
                        topic=sink.topic_name,
                        processor=sink.name,
                    )
            key_type = key_type or sink.topic.key_type
            value_type = value_type or sink.topic.value_type
        out_key = key_type if isinstance(have_key, Dynamic) and key_type is not None else have_key
        out_value = (
            value_type if isinstance(have_value, Dynamic) and value_type is not None else have_value
        )
        if (out_key, out_value) == (have_key, have_value):
            return None
        handling = self.handling(p.subtopology)
        return self.chain(self.flush(p), out_key, out_value, handling, sink=sink.name)
