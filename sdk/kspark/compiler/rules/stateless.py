"""The compiler's rules for stateless nodes: each adds a step to the pending chain (fused
later into one :class:`~kspark.compiler.stages.Chain`), except ``merge`` and
``repartition``, which end a chain and start another.
"""

from __future__ import annotations

import json

from kspark.compiler import stages as st
from kspark.compiler.rules.base import CompilerBase, Pending
from kspark.compiler.specs import (
    known_type,
    sql_scope,
)
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.types import DYNAMIC
from kspark_server import spec as sp

__all__ = ["StatelessRules"]


class StatelessRules(CompilerBase):
    """The rules of the stateless nodes (filters, maps, branches, merges...)."""

    def visit_Filter(self, node: n.Filter) -> Pending:
        step = sp.FilterStep(
            processor=node.name,
            fn=node.fn,
            negate=node.negate,
            vectorized=self._arrow_values(node) if node.vectorized else None,
        )
        return self._step(node, node.parent, step)

    def visit_FilterExpr(self, node: n.FilterExpr) -> Pending:
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

    def visit_Map(self, node: n.Map) -> Pending:
        return self._step(node, node.parent, sp.MapStep(processor=node.name, fn=node.fn))

    def visit_MapValues(self, node: n.MapValues) -> Pending:
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

    def visit_FlatMap(self, node: n.FlatMap) -> Pending:
        return self._step(node, node.parent, sp.FlatMapStep(processor=node.name, fn=node.fn))

    def visit_FlatMapValues(self, node: n.FlatMapValues) -> Pending:
        step = sp.FlatMapValuesStep(processor=node.name, fn=node.fn, with_key=node.with_key)
        return self._step(node, node.parent, step)

    def visit_SelectKey(self, node: n.SelectKey) -> Pending:
        return self._step(node, node.parent, sp.SelectKeyStep(processor=node.name, fn=node.fn))

    def visit_Peek(self, node: n.Peek) -> Pending:
        return self._step(node, node.parent, sp.PeekStep(processor=node.name, fn=node.fn))

    def visit_Foreach(self, node: n.Foreach) -> Pending:
        return self._step(node, node.parent, sp.ForeachStep(processor=node.name, fn=node.fn))

    def visit_Print(self, node: n.Print) -> Pending:
        from kspark_server.printing import PrintAction

        action = PrintAction(node.label, node.file_path, node.mapper)
        return self._step(node, node.parent, sp.ForeachStep(processor=node.name, fn=action))

    def visit_Branch(self, node: n.Branch) -> Pending:
        step = sp.BranchStep(
            processor=node.name,
            predicates=tuple(node.predicates),
            index=node.index,
            split=node.split,
        )
        return self._step(node, node.parent, step)

    def visit_TableFilter(self, node: n.TableFilter) -> Pending:
        step = sp.TableFilterStep(processor=node.name, fn=node.fn, negate=node.negate)
        return self._step(node, node.parent, step)

    def visit_TableMapValues(self, node: n.TableMapValues) -> Pending:
        step = sp.TableMapValuesStep(processor=node.name, fn=node.fn, with_key=node.with_key)
        return self._step(node, node.parent, step)

    def visit_ToStream(self, node: n.ToStream) -> Pending:
        return self.visit(node.parent)

    def visit_ToTable(self, node: n.ToTable) -> Pending:
        # the stream's records are the table's changelog: the join that reads the table
        # applies them to its store
        return self.visit(node.parent)

    def visit_Merge(self, node: n.Merge) -> Pending:
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

    def visit_Repartition(self, node: n.Repartition) -> Pending:
        stage = self.stage_of(node.parent, node)
        shuffled = st.Shuffle(
            input=stage,
            num_partitions=node.num_partitions or self.config.num_partitions,
            key_type=stage.key_type,
            value_type=stage.value_type,
        )
        return self._start(shuffled, node)
