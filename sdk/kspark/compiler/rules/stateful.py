"""The compiler's rules for the stateful nodes of one input: deduplication, the Processor
API's processors, and the aggregations of grouped streams and tables with their
suppression (:mod:`kspark.plan.grouped`).
"""

from __future__ import annotations

import attrs

from kspark.compiler import stages as st
from kspark.compiler.rules.base import CompilerBase, Pending
from kspark.compiler.specs import (
    envelope_json,
    key_value,
    known_type,
    store_spec,
)
from kspark.errors import InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.grouped import (
    Aggregate,
    CogroupAggregate,
    CogroupInput,
    RegroupedSource,
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
from kspark.plan.types import Dynamic, json_packable
from kspark_server import envelope as env
from kspark_server import spec as sp

__all__ = ["StatefulRules"]


class StatefulRules(CompilerBase):
    """The rules of deduplication, processors, aggregations and suppression."""

    def visit_Deduplicate(self, node: n.Deduplicate) -> Pending:
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
            mode=node.mode.value,
            interval_ms=node.interval_ms,
            id_selector=node.id_selector,
            input=key_value(stream.key_type, stream.value_type),
            # which values travel as JSON text through the operator (see json_packable);
            # one it does not read stays a column of Arrow, carried by reference
            packed=sp.Packed(value=reads_value, out=reads_value),
            **self.stateful_fields(node, node.store_name, stream.key_type, stream.value_type),
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
    def visit_Process(self, node: Process) -> Pending:
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
            supplier=node.supplier,
            fixed_key=isinstance(node, ProcessValues),
            stores=tuple(store_spec(d) for d in node.store_defs),
            application_id=self.config.application_id,
            input=key_value(stream.key_type, stream.value_type),
            output=key_value(key_type, value_type),
            packed=sp.Packed(
                value=json_packable(stream.value_type),
                tvalue=table is not None and json_packable(table.value_type),
                out=json_packable(value_type),
            ),
            global_store=global_store,
            **self.stateful_fields(node, node.name, key_type, value_type),
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

    def visit_GlobalStoreSource(self, node: GlobalStoreSource) -> Pending:
        return self.visit_TableSource(node)

    def visit_ProcessValues(self, node: ProcessValues) -> Pending:
        return self.visit_Process(node)

    # -- aggregations (kspark.plan.grouped) ----------------------------------------------
    def visit_Aggregate(self, node: Aggregate) -> Pending:
        return self._aggregate(node, suppress=False)

    def visit_Suppress(self, node: Suppress) -> Pending:
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

    def visit_SuppressTimeLimit(self, node: SuppressTimeLimit) -> Pending:
        # per task of the table's key: each key's latest update waits in the task's
        # buffer (kspark_server.operators.suppress)
        table = self.stage_of(node.parent, node)
        packed = json_packable(table.value_type)
        spec = sp.SuppressSpec(
            time_limit_ms=node.time_limit_ms,
            max_records=node.max_records,
            max_bytes=node.max_bytes,
            when_full=node.when_full,
            input=key_value(table.key_type, table.value_type),
            output=key_value(table.key_type, table.value_type),
            packed=sp.Packed(value=packed, out=packed),
            **self.stateful_fields(node, node.store_name, table.key_type, table.value_type),
        )
        return self._stateful(
            node, spec, table, key_type=table.key_type, value_type=table.value_type
        )

    def visit_RegroupedSource(self, node: RegroupedSource) -> Pending:
        # the grouping's records as it wrote them to its internal topic: the changes
        # of the selected values, which the aggregation subtracts and adds
        changes = change_type(known_type(node.value_type))
        return self.visit_Source(attrs.evolve(node, value_type=changes))

    def visit_TableGroupBy(self, node: TableGroupBy) -> Pending:
        # per task of the source key: each update becomes the changes of the groups its
        # row leaves and joins, which the aggregation reads by group key
        table = self.stage_of(node.parent, node)
        key_type, value_type = known_type(node.key_type), known_type(node.value_type)
        changes = change_type(value_type)
        spec = sp.TableGroupBySpec(
            selector=node.selector,
            input=key_value(table.key_type, table.value_type),
            selected=key_value(key_type, value_type),
            output=key_value(key_type, changes),
            packed=sp.Packed(value=json_packable(table.value_type), out=json_packable(changes)),
            **self.stateful_fields(node, node.store_name, key_type, changes),
        )
        return self._stateful(node, spec, table, key_type=key_type, value_type=changes)

    def visit_CogroupAggregate(self, node: CogroupAggregate) -> Pending:
        return self._aggregate(node, suppress=False)

    def visit_CogroupInput(self, node: CogroupInput) -> Pending:
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

    def _aggregate(self, node: Aggregate, *, suppress: bool) -> Pending:
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
            grace_ms=windows.grace_ms if windows is not None else 0,
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
            packed=sp.Packed(
                # a cogroup's values cross in their own columns, as Arrow values
                value=not cogrouped and json_packable(stream.value_type),
                out=json_packable(out_value),
            ),
            **self.stateful_fields(node, node.store_name, out_key, out_value),
        )
        return self._stateful(node, spec, stream, key_type=out_key, value_type=out_value)
