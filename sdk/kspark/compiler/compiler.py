"""The compiler: a visitor from plan nodes to physical stages.

Runs of stateless steps are fused into one :class:`~kspark.compiler.stages.Chain` (one
Python pass per record, not one UDF per step). Stateful operators become per-task
:class:`~kspark.compiler.stages.Stateful` stages. A node type without a ``visit_<Node>``
rule fails loudly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from kspark import errors
from kspark.compiler import stages as st
from kspark.compiler.specs import (
    bound_topic,
    check_destinations,
    deserialization_mode,
    envelope_json,
    kafka_record_limit,
    key_value,
    known_type,
    read_schema,
    sql_scope,
    store_spec,
    topic_ref,
)
from kspark.config import StreamsConfig
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.grouped import (
    Aggregate,
    CogroupAggregate,
    CogroupInput,
    SessionWindowsDef,
    SlidingWindowsDef,
    Suppress,
    TableGroupBy,
    TimeWindowsDef,
    change_type,
    windowed_type,
)
from kspark.plan.processing import GlobalStoreSource, Process, ProcessValues
from kspark.plan.suppression import SuppressTimeLimit
from kspark.plan.topology import Topology
from kspark.plan.types import DYNAMIC, Dynamic, TypeDesc, describe_type, json_packable
from kspark_server import envelope as env
from kspark_server import spec as sp

__all__ = ["compile_topology"]


def _paired_output(
    first: st.Stage, second: st.Stage, out_value: TypeDesc
) -> tuple[sp.KeyValue, str, sp.Packed]:
    """A two-input operator's output (keyed as ``first``) and the values its input and
    output carry as JSON: ``first``'s as ``value``, ``second``'s as ``tvalue``."""
    packed = sp.Packed(
        value=json_packable(first.value_type),
        tvalue=json_packable(second.value_type),
        out=json_packable(out_value),
    )
    return (
        key_value(first.key_type, out_value),
        envelope_json(first.key_type, out_value),
        packed,
    )


@attrs.frozen(kw_only=True)
class _Pending:
    """A stage plus stateless steps not yet flushed into a chain."""

    base: st.Stage
    steps: tuple[sp.Step, ...]
    key_type: TypeDesc | None
    value_type: TypeDesc | None
    key_origin: str
    value_origin: str
    subtopology: int


def compile_topology(
    topology: Topology,
    config: StreamsConfig,
    *,
    sink_types: Mapping[str, tuple[TypeDesc | None, TypeDesc | None]] | None = None,
) -> st.Output:
    """Lower ``topology`` to stages for the app configured by ``config``. ``sink_types``
    gives sink topics declared key and value types (the test driver's typed output
    topics): a dynamic key or value is converted to them at the sink, and one that does
    not convert goes to the production handler under the sink's name."""
    compiler = _Compiler(topology, config)
    compiler.sink_types = dict(sink_types or {})
    return compiler.compile()


def resolve_handler(value: Any, config: StreamsConfig) -> Any:
    """An instance of a handler given as an instance or a class (which ``StreamsConfig``
    has checked to be a handler of its option's kind), configured."""
    if value is None:
        return None
    handler = value() if isinstance(value, type) else value
    configure = getattr(handler, "configure", None)
    if callable(configure):
        configure(config)
    return handler


class _Compiler:
    def __init__(self, topology: Topology, config: StreamsConfig) -> None:
        self.topology = topology
        self.config = config
        #: the stateful operators' state tuning and checks
        self.state_options = sp.StateOptions(
            base_chunk_bytes=config.state_base_chunk_bytes,
            check_log=config.state_check_log,
            runner=config.stateful_runner,
            local_dir=config.state_dir or "",
            application_id=config.application_id,
        )
        self.memo: dict[int, _Pending] = {}
        self.sink_types: dict[str, tuple[TypeDesc | None, TypeDesc | None]] = {}
        self.subtopology_of = {
            node.name: i for i, group in enumerate(topology.subtopologies()) for node in group
        }
        self.processing_handler = resolve_handler(config.processing_exception_handler, config)
        self.production_handler = resolve_handler(config.production_exception_handler, config)
        for handler in (self.processing_handler, self.production_handler):
            writes = getattr(handler, "writes_dead_letters", False)  # False for None
            if writes and config.dead_letter_queue_topic is None:
                raise errors.ConfigError(
                    f"{type(handler).__name__} writes dead-letter records; set "
                    "StreamsConfig(dead_letter_queue_topic=Topic...)",
                    option="dead_letter_queue_topic",
                )

        self.deserialization = deserialization_mode(config)

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
            sink_specs.append(sp.SinkSpec(index=i, topic=ref, num_partitions=partitions))
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

    def visit(self, node: n.Node) -> _Pending:
        key = id(node)
        if key not in self.memo:
            method: Callable[[Any], _Pending] | None = getattr(
                self, f"visit_{type(node).__name__}", None
            )
            if method is None:
                raise CompilationError(
                    f"no compiler rule for plan node {type(node).__name__} ({node.name})",
                    processor=node.name,
                )
            self.memo[key] = method(node)
        return self.memo[key]

    def handling(self, subtopology: int) -> sp.Handling:
        return sp.Handling(
            processing=self.processing_handler,
            production=self.production_handler,
            subtopology=subtopology,
            num_partitions=self.config.num_partitions,
            dead_letter_dropped=self.config.dead_letter_dropped_records,
            deserialization=self.deserialization,
        )

    def flush(self, p: _Pending) -> st.Stage:
        """The stage with ``p``'s pending steps applied; types must be known here."""
        if not p.steps:
            return p.base
        return self.chain(
            p.base,
            known_type(p.key_type),
            known_type(p.value_type),
            self.handling(p.subtopology),
            p.steps,
        )

    def chain(
        self,
        stage: st.Stage,
        key_type: TypeDesc,
        value_type: TypeDesc,
        handling: sp.Handling,
        steps: tuple[sp.Step, ...] = (),
        **extra: Any,
    ) -> st.Chain:
        """A chain of ``steps`` after ``stage`` whose records come out as ``key_type`` and
        ``value_type`` (a chain without steps converts dynamic keys or values to them);
        ``extra`` are further :class:`~kspark_server.spec.ChainSpec` fields."""
        spec = sp.ChainSpec(
            input=key_value(stage.key_type, stage.value_type),
            output=key_value(key_type, value_type),
            steps=steps,
            output_schema=envelope_json(key_type, value_type),
            handling=handling,
            **extra,
        )
        return st.Chain(input=stage, spec=spec, key_type=key_type, value_type=value_type)

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

    def typed_sink(self, sink: n.Sink, p: _Pending) -> st.Stage | None:
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

    def convert_key(self, stage: st.Stage, key_type: TypeDesc, node: n.Node) -> st.Stage:
        """``stage`` with its dynamic keys converted to ``key_type``; a key that does not
        convert is a failure of ``node`` (its processing exception handler)."""
        handling = self.handling_at(node)
        return self.chain(stage, key_type, stage.value_type, handling, converts_for=node.name)

    def _start(self, stage: st.Stage, node: n.Node) -> _Pending:
        return _Pending(
            base=stage,
            steps=(),
            key_type=stage.key_type,
            value_type=stage.value_type,
            key_origin=node.name,
            value_origin=node.name,
            subtopology=self.subtopology_of.get(node.name, 0),
        )

    def _step(self, node: n.Node, parent: n.Node, step: sp.Step) -> _Pending:
        p = self.visit(parent)
        return attrs.evolve(
            p,
            steps=(*p.steps, step),
            key_type=node.key_type,
            value_type=node.value_type,
            key_origin=node.name if node.changes_key else p.key_origin,
            value_origin=node.name if node.changes_value else p.value_origin,
        )

    def stage_of(self, parent: n.Node, node: n.Node) -> st.Stage:
        """``parent``'s output as a stage, its pending steps flushed, for ``node`` to read."""
        return self.flush(self.visit(parent))

    def handling_at(self, node: n.Node) -> sp.Handling:
        return self.handling(self.subtopology_of.get(node.name, 0))

    def _stateful(
        self,
        node: n.Node,
        spec: sp.StatefulSpec,
        stream: st.Stage,
        *,
        table: st.Stage | None = None,
        key_type: TypeDesc,
        value_type: TypeDesc,
        task_column: str = "key",
        broadcast_table: bool = False,
    ) -> _Pending:
        stage = st.Stateful(
            stream=stream,
            table=table,
            spec=spec,
            num_partitions=self.config.num_partitions,
            task_column=task_column,
            broadcast_table=broadcast_table,
            key_type=key_type,
            value_type=value_type,
        )
        return self._start(stage, node)

    def _join_inputs(
        self, node: n.Node, first: n.Node, second: n.Node, mismatch: str
    ) -> tuple[st.Stage, st.Stage]:
        """A join's two inputs as stages of one key type: a dynamic key is converted to the
        other side's declared one; two declared key types must be equal (``mismatch`` is
        the error, formatted with both)."""
        a, b = self.stage_of(first, node), self.stage_of(second, node)
        if isinstance(a.key_type, Dynamic) and not isinstance(b.key_type, Dynamic):
            a = self.convert_key(a, b.key_type, node)
        elif isinstance(b.key_type, Dynamic) and not isinstance(a.key_type, Dynamic):
            b = self.convert_key(b, a.key_type, node)
        if a.key_type != b.key_type:
            raise InvalidTopologyError(
                f"{node.name}: " + mismatch.format(a.key_type.display(), b.key_type.display()),
                processor=node.name,
            )
        return a, b

    # -- sources -------------------------------------------------------------------
    def _read(self, node: n.Source | n.TableSource, topic: n.TopicSpec | None = None) -> st.Read:
        """A read of ``node``'s topic, or of ``topic``, one of a source of several."""
        topic = topic or bound_topic(node)
        key_type, value_type = known_type(node.key_type), known_type(node.value_type)
        return st.Read(
            topic=topic,
            processor=node.name,
            read_schema=read_schema(topic, key_type, value_type, node.name),
            max_files_per_trigger=self.config.max_files_per_trigger,
            deserialization=self.deserialization,
            subtopology=self.subtopology_of.get(node.name, 0),
            kafka_client=self.config.kafka_client,
            timestamp_policy=self.config.timestamp_policy,
            dead_letter_dropped=self.config.dead_letter_dropped_records,
            key_type=key_type,
            value_type=value_type,
        )

    def visit_Source(self, node: n.Source) -> _Pending:
        if not node.more_topics:
            return self._start(self._read(node), node)
        # a stream of several topics: one read each, their records in one stream
        reads: list[st.Stage] = [self._read(node)]
        for name, topic in node.more_topics:
            if topic is None:
                raise CompilationError(
                    f"{node.name}: topic {name!r} is not bound; StreamsApp binds the "
                    "topology's names (kspark.bindings.bind_topology) before it compiles",
                    processor=node.name,
                )
            reads.append(attrs.evolve(self._read(node, topic), part=len(reads)))
        first = reads[0]
        union = st.Union(parts=tuple(reads), key_type=first.key_type, value_type=first.value_type)
        return self._start(union, node)

    def visit_TableSource(self, node: n.TableSource) -> _Pending:
        return self._start(self._read(node), node)

    def visit_GlobalTableSource(self, node: n.GlobalTableSource) -> _Pending:
        return self.visit_TableSource(node)

    # -- stateless -------------------------------------------------------------------
    def visit_Filter(self, node: n.Filter) -> _Pending:
        step = sp.FilterStep(
            processor=node.name,
            fn=node.fn,
            negate=node.negate,
            vectorized=self._arrow_values(node) if node.vectorized else None,
        )
        return self._step(node, node.parent, step)

    def visit_FilterExpr(self, node: n.FilterExpr) -> _Pending:
        # a JVM filter between Python steps cuts the chain: Spark runs it on the rows
        # the chain before it writes, and the chain after it reads what passes
        stage = self.stage_of(node.parent, node)
        filtered = st.SqlFilter(
            input=stage,
            processor=node.name,
            condition=node.condition,
            scope=sql_scope(stage.value_type),
            key_type=stage.key_type,
            value_type=stage.value_type,
        )
        return self._start(filtered, node)

    def visit_Map(self, node: n.Map) -> _Pending:
        return self._step(node, node.parent, sp.MapStep(processor=node.name, fn=node.fn))

    def visit_MapValues(self, node: n.MapValues) -> _Pending:
        step = sp.MapValuesStep(
            processor=node.name,
            fn=node.fn,
            with_key=node.with_key,
            vectorized=self._arrow_values(node) if node.vectorized else None,
        )
        return self._step(node, node.parent, step)

    def _arrow_values(self, node: n.Filter | n.MapValues) -> sp.ArrowValues:
        """The value types around a vectorized step, which must be known there: its
        values cross into Arrow and back."""
        p = self.visit(node.parent)
        before, after = known_type(p.value_type), known_type(node.value_type)
        if before is DYNAMIC or after is DYNAMIC:
            raise CompilationError(
                f"{node.name}: a vectorized step needs declared value types before and "
                "after it (its values cross into Arrow arrays); declare value_type= upstream "
                "and on the step",
                processor=node.name,
            )
        return sp.ArrowValues(
            before=before.spec(),
            before_spark=json.dumps(before.spark_json()),
            after=after.spec(),
            after_spark=json.dumps(after.spark_json()),
        )

    def visit_FlatMap(self, node: n.FlatMap) -> _Pending:
        return self._step(node, node.parent, sp.FlatMapStep(processor=node.name, fn=node.fn))

    def visit_FlatMapValues(self, node: n.FlatMapValues) -> _Pending:
        step = sp.FlatMapValuesStep(processor=node.name, fn=node.fn, with_key=node.with_key)
        return self._step(node, node.parent, step)

    def visit_SelectKey(self, node: n.SelectKey) -> _Pending:
        return self._step(node, node.parent, sp.SelectKeyStep(processor=node.name, fn=node.fn))

    def visit_Peek(self, node: n.Peek) -> _Pending:
        return self._step(node, node.parent, sp.PeekStep(processor=node.name, fn=node.fn))

    def visit_Foreach(self, node: n.Foreach) -> _Pending:
        return self._step(node, node.parent, sp.ForeachStep(processor=node.name, fn=node.fn))

    def visit_Print(self, node: n.Print) -> _Pending:
        from kspark_server.printing import PrintAction

        action = PrintAction(node.label, node.file_path, node.mapper)
        return self._step(node, node.parent, sp.ForeachStep(processor=node.name, fn=action))

    def visit_Branch(self, node: n.Branch) -> _Pending:
        step = sp.BranchStep(
            processor=node.name,
            predicates=tuple(node.predicates),
            index=node.index,
            split=node.split,
        )
        return self._step(node, node.parent, step)

    def visit_TableFilter(self, node: n.TableFilter) -> _Pending:
        step = sp.TableFilterStep(processor=node.name, fn=node.fn, negate=node.negate)
        return self._step(node, node.parent, step)

    def visit_TableMapValues(self, node: n.TableMapValues) -> _Pending:
        step = sp.TableMapValuesStep(processor=node.name, fn=node.fn, with_key=node.with_key)
        return self._step(node, node.parent, step)

    def visit_ToStream(self, node: n.ToStream) -> _Pending:
        return self.visit(node.parent)

    def visit_ToTable(self, node: n.ToTable) -> _Pending:
        # the stream's records are the table's changelog: the join that reads the table
        # applies them to its store
        return self.visit(node.parent)

    def visit_Merge(self, node: n.Merge) -> _Pending:
        parts = tuple(self.stage_of(i, node) for i in node.inputs)
        first = parts[0]
        for other in parts[1:]:
            if other.key_type != first.key_type or other.value_type != first.value_type:
                raise InvalidTopologyError(
                    f"{node.name}: merged streams must have the same key and value types "
                    f"({first.key_type.display()}, {first.value_type.display()}) vs "
                    f"({other.key_type.display()}, {other.value_type.display()})",
                    processor=node.name,
                )
        union = st.Union(parts=parts, key_type=first.key_type, value_type=first.value_type)
        return self._start(union, node)

    def visit_Repartition(self, node: n.Repartition) -> _Pending:
        stage = self.stage_of(node.parent, node)
        shuffled = st.Shuffle(
            input=stage,
            num_partitions=node.num_partitions or self.config.num_partitions,
            key_type=stage.key_type,
            value_type=stage.value_type,
        )
        return self._start(shuffled, node)

    # -- stateful ----------------------------------------------------------------------
    def visit_StreamTableJoin(self, node: n.StreamTableJoin) -> _Pending:
        stream, table = self._join_inputs(
            node,
            node.stream,
            node.table,
            "stream key type {} differs from table key type {}; select_key the stream first",
        )
        out_value = known_type(node.value_type)
        output, output_schema, packed = _paired_output(stream, table, out_value)
        spec = sp.JoinSpec(
            processor=node.name,
            store=node.store_name,
            left=node.left,
            versioned=node.versioned,
            history_retention_ms=node.history_retention_ms,
            grace_ms=node.grace_ms,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            stream=key_value(stream.key_type, stream.value_type),
            table=key_value(table.key_type, table.value_type),
            output=output,
            output_schema=output_schema,
            packed=packed,
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(
            node, spec, stream, table=table, key_type=stream.key_type, value_type=out_value
        )

    def visit_StreamGlobalTableJoin(self, node: n.StreamGlobalTableJoin) -> _Pending:
        # the stream-table join's operator, its records grouped by the table key: each
        # stream record by the key its selector gives (JoinKeyStage: ks_gkey), each table
        # update by its own, so that no task needs the whole table; the stream record's
        # own key rides along in ``key`` and is the output's (docs/design/global-tables.md)
        stream = self.stage_of(node.stream, node)
        table = self.stage_of(node.table, node)
        handling = self.handling_at(node)
        key_spec = sp.JoinKeySpec(
            processor=node.name,
            input=key_value(stream.key_type, stream.value_type),
            key_selector=node.key_selector,
            table_key=table.key_type.spec(),
            output_schema=envelope_json(
                stream.key_type,
                stream.value_type,
                [env.field("ks_gkey", table.key_type.spark_json())],
            ),
            handling=handling,
        )
        keyed = st.JoinKeyStage(
            input=stream, spec=key_spec, key_type=stream.key_type, value_type=stream.value_type
        )
        out_value = known_type(node.value_type)
        output, output_schema, packed = _paired_output(stream, table, out_value)
        spec = sp.JoinSpec(
            processor=node.name,
            store=node.store_name,
            left=node.left,
            versioned=False,
            history_retention_ms=0,
            grace_ms=0,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            stream=key_value(stream.key_type, stream.value_type),
            table=key_value(table.key_type, table.value_type),
            output=output,
            output_schema=output_schema,
            packed=packed,
            handling=handling,
            state=self.state_options,
            global_table=True,
        )
        return self._stateful(
            node,
            spec,
            keyed,
            table=table,
            key_type=stream.key_type,
            value_type=out_value,
            task_column="ks_gkey",
        )

    def visit_StreamStreamJoin(self, node: n.StreamStreamJoin) -> _Pending:
        # kspark's own operator (kspark_server.operators.window_join), not Spark's stream-stream join:
        # Spark's closes windows by one query-wide watermark, which moves only between
        # micro-batches, where Kafka Streams closes them by each task's stream time
        left, right = self._join_inputs(
            node,
            node.left,
            node.right,
            "the streams' key types differ ({} and {}); select_key one of them first",
        )
        out_value = known_type(node.value_type)
        output, output_schema, packed = _paired_output(left, right, out_value)
        spec = sp.WindowJoinSpec(
            processor=node.name,
            store=node.store_name,
            mode=node.mode,
            before_ms=node.before_ms,
            after_ms=node.after_ms,
            grace_ms=node.grace_ms,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            left=key_value(left.key_type, left.value_type),
            right=key_value(right.key_type, right.value_type),
            output=output,
            output_schema=output_schema,
            packed=packed,
            handling=self.handling_at(node),
            state=self.state_options,
        )
        # the right stream is the operator's second input, as a stream-table join's table
        return self._stateful(
            node, spec, left, table=right, key_type=left.key_type, value_type=out_value
        )

    def visit_TableTableJoin(self, node: n.TableTableJoin) -> _Pending:
        # both tables' updates go to the task of their key (the operator's input is
        # grouped by task), so the two tables are co-partitioned whatever their sources
        left, right = self._join_inputs(
            node,
            node.left,
            node.right,
            "the tables' key types differ ({} and {}); a same-key join needs one key type",
        )
        out_value = known_type(node.value_type)
        output, output_schema, packed = _paired_output(left, right, out_value)
        spec = sp.TableJoinSpec(
            processor=node.name,
            store=node.store_name,
            mode=node.mode,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            left=key_value(left.key_type, left.value_type),
            right=key_value(right.key_type, right.value_type),
            output=output,
            output_schema=output_schema,
            packed=packed,
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(
            node, spec, left, table=right, key_type=left.key_type, value_type=out_value
        )

    def visit_ForeignKeyJoin(self, node: n.ForeignKeyJoin) -> _Pending:
        # three operators, one shuffle each (kspark_server.operators.fk_messages): by the
        # left key, by the foreign key (with the right table's updates), by the left key
        left = self.stage_of(node.left, node)
        right = self.stage_of(node.right, node)
        if isinstance(right.key_type, Dynamic):
            raise InvalidTopologyError(
                f"{node.name}: the other table's key type is not declared; a foreign-key "
                "join needs it (the foreign keys take it): give the table key_type=...",
                processor=node.name,
            )
        out_value = known_type(node.value_type)
        message = describe_type(bytes)
        left_packed = json_packable(left.value_type)
        right_packed = json_packable(right.value_type)
        handling = self.handling_at(node)
        subscribe = sp.FkSubscribeSpec(
            processor=f"{node.name}-SUBSCRIPTION",
            store=node.subscription_store,
            extractor=node.extractor,
            extractor_with_key=node.extractor_with_key,
            left=key_value(left.key_type, left.value_type),
            fk=right.key_type.spec(),
            output=key_value(right.key_type, message),
            output_schema=envelope_json(right.key_type, message),
            packed=sp.Packed(value=left_packed),
            handling=handling,
            state=self.state_options,
        )
        subscriptions = st.Stateful(
            stream=left,
            table=None,
            spec=subscribe,
            num_partitions=self.config.num_partitions,
            key_type=right.key_type,
            value_type=message,
        )
        match = sp.FkMatchSpec(
            processor=f"{node.name}-REGISTRATION",
            store=node.registration_store,
            stream=key_value(right.key_type, message),
            right=key_value(right.key_type, right.value_type),
            output=key_value(left.key_type, message),
            output_schema=envelope_json(left.key_type, message),
            packed=sp.Packed(tvalue=right_packed),
            handling=handling,
            state=self.state_options,
        )
        responses = st.Stateful(
            stream=subscriptions,
            table=right,
            spec=match,
            num_partitions=self.config.num_partitions,
            key_type=left.key_type,
            value_type=message,
        )
        resolve = sp.FkResolveSpec(
            processor=node.name,
            store=node.store_name,
            mode=node.mode,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            key=left.key_type.spec(),
            left_value=left.value_type.spec(),
            right_value=right.value_type.spec(),
            left_packed=left_packed,
            right_packed=right_packed,
            input=key_value(left.key_type, message),
            output=key_value(left.key_type, out_value),
            output_schema=envelope_json(left.key_type, out_value),
            packed=sp.Packed(out=json_packable(out_value)),
            handling=handling,
            state=self.state_options,
        )
        return self._stateful(
            node, resolve, responses, key_type=left.key_type, value_type=out_value
        )

    def visit_Deduplicate(self, node: n.Deduplicate) -> _Pending:
        stream = self.stage_of(node.parent, node)
        task_column = "key"
        if node.mode is n.DedupMode.BY_ID:
            assert node.id_selector is not None  # Deduplicate checks it for BY_ID
            id_spec = sp.DedupIdSpec(
                processor=node.name,
                id_selector=node.id_selector,
                input=key_value(stream.key_type, stream.value_type),
                output_schema=envelope_json(
                    stream.key_type, stream.value_type, [env.field("ks_id", "string")]
                ),
                handling=self.handling_at(node),
            )
            stream = st.IdStage(
                input=stream, spec=id_spec, key_type=stream.key_type, value_type=stream.value_type
            )
            task_column = "ks_id"
        reads_value = node.mode is n.DedupMode.BY_KEY_VALUE and json_packable(stream.value_type)
        dedup = sp.DedupSpec(
            processor=node.name,
            mode=node.mode.value,
            interval_ms=node.interval_ms,
            id_selector=node.id_selector,
            store=node.store_name,
            input=key_value(stream.key_type, stream.value_type),
            output_schema=envelope_json(stream.key_type, stream.value_type),
            # which values travel as JSON text through the operator (see json_packable);
            # one it does not read stays a column of Arrow, carried by reference
            packed=sp.Packed(value=reads_value, out=reads_value),
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(
            node,
            dedup,
            stream,
            key_type=stream.key_type,
            value_type=stream.value_type,
            task_column=task_column,
        )

    # -- the Processor API (kspark.plan.processing) -------------------------------------
    def visit_Process(self, node: Process) -> _Pending:
        stream = self.stage_of(node.parent, node)
        key_type, value_type = known_type(node.key_type), known_type(node.value_type)
        # a global store's records reach every task of the processor (each task keeps
        # the whole store): the table side of the operator, broadcast
        table: st.Stage | None = None
        global_store: sp.GlobalStoreSpec | None = None
        if node.global_stores:
            (source,) = node.global_stores  # the build refuses more than one
            table = self.stage_of(source, node)
            global_store = sp.GlobalStoreSpec(
                name=source.store.name,
                key=table.key_type.spec(),
                value=table.value_type.spec(),
                update_supplier=source.update_supplier,
                source=source.name,
            )
        spec = sp.ProcessorSpec(
            processor=node.name,
            store=node.name,
            supplier=node.supplier,
            fixed_key=isinstance(node, ProcessValues),
            stores=tuple(store_spec(d) for d in node.store_defs),
            application_id=self.config.application_id,
            input=key_value(stream.key_type, stream.value_type),
            output=key_value(key_type, value_type),
            output_schema=envelope_json(key_type, value_type),
            packed=sp.Packed(
                value=json_packable(stream.value_type),
                tvalue=table is not None and json_packable(table.value_type),
                out=json_packable(value_type),
            ),
            handling=self.handling_at(node),
            state=self.state_options,
            global_store=global_store,
        )
        return self._stateful(
            node,
            spec,
            stream,
            table=table,
            key_type=key_type,
            value_type=value_type,
            broadcast_table=table is not None,
        )

    def visit_GlobalStoreSource(self, node: GlobalStoreSource) -> _Pending:
        return self.visit_TableSource(node)

    def visit_ProcessValues(self, node: ProcessValues) -> _Pending:
        return self.visit_Process(node)

    # -- aggregations (kspark.plan.grouped) ----------------------------------------------
    def visit_Aggregate(self, node: Aggregate) -> _Pending:
        return self._aggregate(node, suppress=False)

    def visit_Suppress(self, node: Suppress) -> _Pending:
        # the aggregation's own operator holds its windows back (no second store), so the
        # suppression must be the aggregated table's only reader
        agg = node.parent
        assert isinstance(agg, Aggregate)  # Suppress checks it
        readers = self.topology.children()[agg.name]
        if readers != [node.name]:
            raise InvalidTopologyError(
                f"{node.name}: the suppressed table of {agg.name} is also read by "
                f"{sorted(set(readers) - {node.name})}; read it only through the suppression",
                processor=node.name,
            )
        return self._aggregate(agg, suppress=True)

    def visit_SuppressTimeLimit(self, node: SuppressTimeLimit) -> _Pending:
        # per task of the table's key: each key's latest update waits in the task's
        # buffer (kspark_server.operators.suppress)
        table = self.stage_of(node.parent, node)
        packed = json_packable(table.value_type)
        spec = sp.SuppressSpec(
            processor=node.name,
            store=node.store_name,
            time_limit_ms=node.time_limit_ms,
            max_records=node.max_records,
            max_bytes=node.max_bytes,
            when_full=node.when_full,
            input=key_value(table.key_type, table.value_type),
            output=key_value(table.key_type, table.value_type),
            output_schema=envelope_json(table.key_type, table.value_type),
            packed=sp.Packed(value=packed, out=packed),
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(
            node, spec, table, key_type=table.key_type, value_type=table.value_type
        )

    def visit_TableGroupBy(self, node: TableGroupBy) -> _Pending:
        # per task of the source key: each update becomes the changes of the groups its
        # row leaves and joins, which the aggregation reads by group key
        table = self.stage_of(node.parent, node)
        key_type, value_type = known_type(node.key_type), known_type(node.value_type)
        changes = change_type(value_type)
        spec = sp.TableGroupBySpec(
            processor=node.name,
            store=node.store_name,
            selector=node.selector,
            input=key_value(table.key_type, table.value_type),
            selected=key_value(key_type, value_type),
            output=key_value(key_type, changes),
            output_schema=envelope_json(key_type, changes),
            packed=sp.Packed(value=json_packable(table.value_type), out=json_packable(changes)),
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(node, spec, table, key_type=key_type, value_type=changes)

    def visit_CogroupAggregate(self, node: CogroupAggregate) -> _Pending:
        return self._aggregate(node, suppress=False)

    def visit_CogroupInput(self, node: CogroupInput) -> _Pending:
        # no operator of its own: the cogrouped aggregation reads its parent, tagged
        return self.visit(node.parent)

    def _cogroup_input(self, node: CogroupAggregate) -> st.Cogroup:
        """The cogrouped streams as one stage, their keys of one type: a dynamic key is
        converted to the declared one; two declared key types must be equal."""
        parts = [self.stage_of(i.parent, node) for i in node.inputs]
        declared = [p.key_type for p in parts if not isinstance(p.key_type, Dynamic)]
        if declared:
            parts = [
                self.convert_key(p, declared[0], node) if isinstance(p.key_type, Dynamic) else p
                for p in parts
            ]
        for p in parts[1:]:
            if p.key_type != parts[0].key_type:
                raise InvalidTopologyError(
                    f"{node.name}: cogrouped streams must have one key type, got "
                    f"{parts[0].key_type.display()} and {p.key_type.display()}; select_key "
                    "or map one of them first",
                    processor=node.name,
                )
        return st.Cogroup(
            parts=tuple(parts), key_type=parts[0].key_type, value_type=parts[0].value_type
        )

    def _aggregate(self, node: Aggregate, *, suppress: bool) -> _Pending:
        cogrouped = isinstance(node, CogroupAggregate)
        stream = (
            self._cogroup_input(node)
            if isinstance(node, CogroupAggregate)
            else self.stage_of(node.parent, node)
        )
        key_type = stream.key_type
        # a reduction's values keep their type; a count's and an aggregate's are the node's
        out_value = stream.value_type if node.op == "reduce" else known_type(node.value_type)
        if node.grouped_table and node.op == "reduce":
            # the records are Change records of the selected values
            out_value = known_type(node.parent.value_type)
        windows = node.windows
        w = windows if isinstance(windows, TimeWindowsDef) else None
        sw = windows if isinstance(windows, SessionWindowsDef) else None
        sl = windows if isinstance(windows, SlidingWindowsDef) else None
        out_key = windowed_type(key_type) if windows is not None else key_type
        spec = sp.AggregateSpec(
            processor=node.name,
            store=node.store_name,
            op=node.op,
            reducer=node.reducer,
            initializer=node.initializer,
            aggregator=node.aggregator,
            input=key_value(key_type, stream.value_type),
            output=key_value(out_key, out_value),
            window_size_ms=w.size_ms if w is not None else sl.size_ms if sl is not None else 0,
            window_advance_ms=(
                w.advance_ms if w is not None else sl.size_ms if sl is not None else 0
            ),
            grace_ms=(
                w.grace_ms
                if w is not None
                else sw.grace_ms
                if sw is not None
                else sl.grace_ms
                if sl is not None
                else 0
            ),
            session_gap_ms=sw.gap_ms if sw is not None else 0,
            merger=node.merger,
            # EmitStrategy.on_window_close() is the suppression fused into the operator
            suppress=suppress or node.emit_on_close,
            sliding=sl is not None,
            retention_ms=node.retention_ms,
            table=node.grouped_table,
            subtractor=node.subtractor,
            cogroup=tuple(
                sp.CogroupInput(value=part.value_type.spec(), aggregator=i.aggregator)
                for i, part in zip(node.inputs, stream.parts, strict=True)
            )
            if isinstance(node, CogroupAggregate) and isinstance(stream, st.Cogroup)
            else (),
            output_schema=envelope_json(out_key, out_value),
            packed=sp.Packed(
                # a cogroup's values cross in their own columns, as Arrow values
                value=not cogrouped and json_packable(stream.value_type),
                out=json_packable(out_value),
            ),
            handling=self.handling_at(node),
            state=self.state_options,
        )
        return self._stateful(node, spec, stream, key_type=out_key, value_type=out_value)
