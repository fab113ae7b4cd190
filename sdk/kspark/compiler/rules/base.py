"""The compiler's core: the state every rule shares, the memoized visit that runs a
node's ``visit_<Node>`` rule, the helpers that build chains and stateful stages, and the
sources, which every other rule reads from.

The rules for the other node kinds stand in modules of their own (one per kind of
operator: :mod:`.stateless`, :mod:`.joins`, :mod:`.stateful`), each a class that builds on
:class:`CompilerBase`; :mod:`kspark.compiler.compiler` puts them together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import attrs

from kspark import errors
from kspark.compiler import stages as st
from kspark.compiler.specs import (
    bound_topic,
    deserialization_mode,
    envelope_json,
    key_value,
    known_type,
    read_schema,
)
from kspark.config import StreamsConfig
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.topology import Topology
from kspark.plan.types import Dynamic, TypeDesc
from kspark_server import spec as sp

__all__ = ["CompilerBase", "Pending", "StatefulFields", "resolve_handler"]


@attrs.frozen(kw_only=True)
class Pending:
    """A stage plus stateless steps not yet flushed into a chain."""

    base: st.Stage
    steps: tuple[sp.Step, ...]
    key_type: TypeDesc | None
    value_type: TypeDesc | None
    key_origin: str
    value_origin: str
    subtopology: int


class StatefulFields(TypedDict):
    """The fields of a stateful operator's spec that the compiler fills alike for all."""

    processor: str
    store: str
    output_schema: str
    handling: sp.Handling
    state: sp.StateOptions


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


class CompilerBase:
    """What every compiler rule builds on; one instance compiles one topology."""

    def __init__(self, topology: Topology, config: StreamsConfig) -> None:
        self.topology = topology
        self.config = config
        #: the stateful operators' state tuning and checks
        self.state_options = sp.StateOptions(
            base_chunk_bytes=config.state_base_chunk_bytes,
            check_log=config.state_check_log,
            local_dir=config.state_dir or "",
            application_id=config.application_id,
        )
        self.memo: dict[int, Pending] = {}
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

    def visit(self, node: n.Node) -> Pending:
        key = id(node)
        if key not in self.memo:
            method: Callable[[Any], Pending] | None = getattr(
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

    def flush(self, p: Pending) -> st.Stage:
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

    def convert_key(self, stage: st.Stage, key_type: TypeDesc, node: n.Node) -> st.Stage:
        """``stage`` with its dynamic keys converted to ``key_type``; a key that does not
        convert is a failure of ``node`` (its processing exception handler)."""
        handling = self.handling_at(node)
        return self.chain(stage, key_type, stage.value_type, handling, converts_for=node.name)

    def _start(self, stage: st.Stage, node: n.Node) -> Pending:
        return Pending(
            base=stage,
            steps=(),
            key_type=stage.key_type,
            value_type=stage.value_type,
            key_origin=node.name,
            value_origin=node.name,
            subtopology=self.subtopology_of.get(node.name, 0),
        )

    def _step(self, node: n.Node, parent: n.Node, step: sp.Step) -> Pending:
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

    def stateful_fields(
        self,
        node: n.Node,
        store: str,
        key: TypeDesc,
        value: TypeDesc,
        handling: sp.Handling | None = None,
    ) -> StatefulFields:
        """A stateful spec's :class:`StatefulFields`: ``node``'s processor and handling
        (else ``handling``), its task state ``store``, the state options, and the schema of
        its output, keyed ``key`` with values ``value``."""
        return StatefulFields(
            processor=node.name,
            store=store,
            output_schema=envelope_json(key, value),
            handling=self.handling_at(node) if handling is None else handling,
            state=self.state_options,
        )

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
    ) -> Pending:
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

    def visit_Source(self, node: n.Source) -> Pending:
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

    def visit_TableSource(self, node: n.TableSource) -> Pending:
        return self._start(self._read(node), node)

    def visit_GlobalTableSource(self, node: n.GlobalTableSource) -> Pending:
        return self.visit_TableSource(node)
