"""The compiler's rules for the joins: stream-table, stream-global table, stream-stream
(windowed), table-table and foreign-key joins, each one or more stateful operators whose
two inputs are brought to one key type first.
"""

from __future__ import annotations

from kspark.compiler import stages as st
from kspark.compiler.rules.base import CompilerBase, Pending, StatefulFields
from kspark.compiler.specs import (
    envelope_json,
    key_value,
    known_type,
)
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import fkjoin
from kspark.plan import nodes as n
from kspark.plan.types import Dynamic, TypeDesc, json_packable
from kspark_server import envelope as env
from kspark_server import spec as sp

__all__ = ["JoinRules"]


class _JoinFields(StatefulFields):
    """The fields of a same-key join's spec that every such join has."""

    joiner: sp.Fn
    joiner_with_key: bool
    output: sp.KeyValue
    packed: sp.Packed


class JoinRules(CompilerBase):
    """The rules of the join nodes."""

    def visit_StreamTableJoin(self, node: n.StreamTableJoin) -> Pending:
        stream, table = self._join_inputs(
            node,
            node.stream,
            node.table,
            "stream key type {} differs from table key type {}; select_key the stream first",
        )
        out_value, fields = self._join_fields(node, stream, table)
        spec = sp.JoinSpec(
            left=node.left,
            versioned=node.versioned,
            history_retention_ms=node.history_retention_ms,
            grace_ms=node.grace_ms,
            stream=key_value(stream.key_type, stream.value_type),
            table=key_value(table.key_type, table.value_type),
            **fields,
        )
        return self._stateful(
            node, spec, stream, table=table, key_type=stream.key_type, value_type=out_value
        )

    def visit_StreamGlobalTableJoin(self, node: n.StreamGlobalTableJoin) -> Pending:
        # the stream-table join's operator, its records grouped by the table key: each
        # stream record by the key its selector gives (JoinKeyStage: ks_gkey), each table
        # update by its own, so that no task needs the whole table; the stream record's
        # own key rides along in ``key`` and is the output's (docs/design/global-tables.md)
        stream = self.stage_of(node.stream, node)
        table = self.stage_of(node.table, node)
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
            handling=self.handling_at(node),
        )
        keyed = st.JoinKeyStage(
            input=stream, spec=key_spec, key_type=stream.key_type, value_type=stream.value_type
        )
        out_value, fields = self._join_fields(node, stream, table)
        spec = sp.JoinSpec(
            left=node.left,
            versioned=False,
            history_retention_ms=0,
            grace_ms=0,
            stream=key_value(stream.key_type, stream.value_type),
            table=key_value(table.key_type, table.value_type),
            global_table=True,
            **fields,
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

    def visit_StreamStreamJoin(self, node: n.StreamStreamJoin) -> Pending:
        # kspark's own operator (kspark_server.operators.window_join), not Spark's stream-stream join:
        # Spark's closes windows by one query-wide watermark, which moves only between
        # micro-batches, where Kafka Streams closes them by each task's stream time
        left, right = self._join_inputs(
            node,
            node.left,
            node.right,
            "the streams' key types differ ({} and {}); select_key one of them first",
        )
        out_value, fields = self._join_fields(node, left, right)
        spec = sp.WindowJoinSpec(
            mode=node.mode,
            before_ms=node.before_ms,
            after_ms=node.after_ms,
            grace_ms=node.grace_ms,
            left=key_value(left.key_type, left.value_type),
            right=key_value(right.key_type, right.value_type),
            **fields,
        )
        # the right stream is the operator's second input, as a stream-table join's table
        return self._stateful(
            node, spec, left, table=right, key_type=left.key_type, value_type=out_value
        )

    def visit_TableTableJoin(self, node: n.TableTableJoin) -> Pending:
        # both tables' updates go to the task of their key (the operator's input is
        # grouped by task), so the two tables are co-partitioned whatever their sources
        left, right = self._join_inputs(
            node,
            node.left,
            node.right,
            "the tables' key types differ ({} and {}); a same-key join needs one key type",
        )
        out_value, fields = self._join_fields(node, left, right)
        spec = sp.TableJoinSpec(
            mode=node.mode,
            left=key_value(left.key_type, left.value_type),
            right=key_value(right.key_type, right.value_type),
            **fields,
        )
        return self._stateful(
            node, spec, left, table=right, key_type=left.key_type, value_type=out_value
        )

    def _join_fields(
        self,
        node: n.StreamTableJoin | n.StreamStreamJoin | n.TableTableJoin,
        first: st.Stage,
        second: st.Stage,
    ) -> tuple[TypeDesc, _JoinFields]:
        """A same-key join's output value type and its spec's common fields: the output
        keyed as ``first``, and the values its input and output carry as JSON (``first``'s
        as ``value``, ``second``'s as ``tvalue``)."""
        out_value = known_type(node.value_type)
        packed = sp.Packed(
            value=json_packable(first.value_type),
            tvalue=json_packable(second.value_type),
            out=json_packable(out_value),
        )
        return out_value, _JoinFields(
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            output=key_value(first.key_type, out_value),
            packed=packed,
            **self.stateful_fields(node, node.store_name, first.key_type, out_value),
        )

    def visit_ForeignKeyJoin(self, node: n.ForeignKeyJoin) -> Pending:
        # three operators, one shuffle each (kspark_server.operators.fk_messages): by the
        # left key, by the foreign key (with the right table's updates), by the left key;
        # the sub-topology cut runs them as the plan nodes of kspark.plan.fkjoin
        subscribe, match, resolve = fkjoin.stages(node)
        left = self.stage_of(node.left, node)
        right = self.stage_of(node.right, node)
        handling = self.handling_at(node)
        fk = _foreign_key(node, right.key_type)
        subscriptions = self._fk_subscribe(subscribe, left, fk, handling)
        responses = self._fk_match(match, subscriptions, right, left.key_type, handling)
        resolved = self._fk_resolve(resolve, responses, left.value_type, right.value_type, handling)
        return self._start(resolved, node)

    def visit_FkSubscribe(self, node: fkjoin.FkSubscribe) -> Pending:
        # the stages' messages cross internal topics (the sub-topology cut), and each
        # stage must take all of a micro-batch's messages in the next one: a key's
        # versions start again after a delete, and messages of two of its batches read
        # together could be taken out of order (kspark_server.operators.fk_messages)
        paced = self._paced()
        if paced is not None:
            raise CompilationError(
                f"{node.name}: a foreign-key join's stages take each micro-batch's "
                f"messages whole in the next one, and {paced} splits a run into "
                f"micro-batches whose messages would be read together; unset {paced}",
                processor=node.name,
            )
        left = self.stage_of(node.parent, node)
        fk = _foreign_key(node, known_type(node.key_type))
        return self._start(self._fk_subscribe(node, left, fk, self.handling_at(node)), node)

    def visit_FkMatch(self, node: fkjoin.FkMatch) -> Pending:
        subscriptions = self.stage_of(node.subscriptions, node)
        right = self.stage_of(node.right, node)
        left_key = known_type(node.key_type)
        stage = self._fk_match(node, subscriptions, right, left_key, self.handling_at(node))
        return self._start(stage, node)

    def visit_FkResolve(self, node: fkjoin.FkResolve) -> Pending:
        stage = self._fk_resolve(
            node,
            self.stage_of(node.parent, node),
            known_type(node.left_value_type),
            known_type(node.right_value_type),
            self.handling_at(node),
        )
        return self._start(stage, node)

    def _paced(self) -> str | None:
        """The option that limits what a micro-batch reads, if any: then one run of
        ``run_until_caught_up`` may take several micro-batches, and a stage the messages
        of several together (Spark's ``availableNow`` reads what was there as it started)."""
        if self.config.max_files_per_trigger is not None:
            return "max_files_per_trigger"
        for source in self.topology.sources():
            parts = (
                source.topic_parts()
                if isinstance(source, n.Source)
                else ((source.topic_name, source.topic),)
            )
            for name, topic in parts:
                for key, _ in () if topic is None else topic.options:
                    if key.lower() in ("maxoffsetspertrigger", "maxfilespertrigger"):
                        return f"option {key} of topic {name}"
        return None

    def _fk_subscribe(
        self, node: fkjoin.FkSubscribe, left: st.Stage, fk: TypeDesc, handling: sp.Handling
    ) -> st.Stateful:
        """The first stage: ``left``'s updates, their subscriptions keyed by the foreign
        key ``fk`` (the right table's key type)."""
        spec = sp.FkSubscribeSpec(
            extractor=node.extractor,
            extractor_with_key=node.extractor_with_key,
            left=key_value(left.key_type, left.value_type),
            fk=fk.spec(),
            output=key_value(fk, fkjoin.MESSAGE),
            packed=sp.Packed(value=json_packable(left.value_type)),
            **self.stateful_fields(node, node.store_name, fk, fkjoin.MESSAGE, handling),
        )
        return self._fk_stage(spec, left, None, fk)

    def _fk_match(
        self,
        node: fkjoin.FkMatch,
        subscriptions: st.Stage,
        right: st.Stage,
        left_key: TypeDesc,
        handling: sp.Handling,
    ) -> st.Stateful:
        """The second stage: the subscriptions and ``right``'s updates, keyed by the
        foreign key; the responses keyed by the left key (``left_key``)."""
        spec = sp.FkMatchSpec(
            stream=key_value(subscriptions.key_type, fkjoin.MESSAGE),
            right=key_value(right.key_type, right.value_type),
            output=key_value(left_key, fkjoin.MESSAGE),
            packed=sp.Packed(tvalue=json_packable(right.value_type)),
            **self.stateful_fields(node, node.store_name, left_key, fkjoin.MESSAGE, handling),
        )
        return self._fk_stage(spec, subscriptions, right, left_key)

    def _fk_resolve(
        self,
        node: fkjoin.FkResolve,
        responses: st.Stage,
        left_value: TypeDesc,
        right_value: TypeDesc,
        handling: sp.Handling,
    ) -> st.Stateful:
        """The last stage: the responses, keyed by the left key, joined into the result."""
        key = responses.key_type
        out_value = known_type(node.value_type)
        spec = sp.FkResolveSpec(
            mode=node.mode,
            joiner=node.joiner,
            joiner_with_key=node.joiner_with_key,
            key=key.spec(),
            left_value=left_value.spec(),
            right_value=right_value.spec(),
            left_packed=json_packable(left_value),
            right_packed=json_packable(right_value),
            input=key_value(key, fkjoin.MESSAGE),
            output=key_value(key, out_value),
            packed=sp.Packed(out=json_packable(out_value)),
            **self.stateful_fields(node, node.store_name, key, out_value, handling),
        )
        return self._fk_stage(spec, responses, None, key, out_value)

    def _fk_stage(
        self,
        spec: sp.StatefulSpec,
        stream: st.Stage,
        table: st.Stage | None,
        key: TypeDesc,
        value: TypeDesc = fkjoin.MESSAGE,
    ) -> st.Stateful:
        """One stage of a foreign-key join; its records are the join's messages, but for
        the last stage's (the join's results, ``value``)."""
        return st.Stateful(
            stream=stream,
            table=table,
            spec=spec,
            num_partitions=self.config.num_partitions,
            key_type=key,
            value_type=value,
        )


def _foreign_key(node: n.Node, key_type: TypeDesc) -> TypeDesc:
    """The foreign keys' type, the other table's key type, which must be declared."""
    if isinstance(key_type, Dynamic):
        raise InvalidTopologyError(
            f"{node.name}: the other table's key type is not declared; a foreign-key "
            "join needs it (the foreign keys take it): give the table key_type=...",
            processor=node.name,
        )
    return key_type
