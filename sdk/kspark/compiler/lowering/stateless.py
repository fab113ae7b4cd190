"""Stateless stages: a fused chain of steps, and the id column of ``deduplicate``."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering.columns import schema
from kspark.compiler.lowering.constants import add_constants, describe_constants
from kspark_server import envelope as env
from kspark_server.spec import FlatMapStep, FlatMapValuesStep

__all__ = ["chain", "id_stage", "join_key_stage", "topic_name_stage"]


def chain(df: DataFrame, stage: st.Chain, constants: dict[str, Any]) -> DataFrame:
    """The chain's ``mapInArrow`` pass over ``df``; the ``constants`` columns (name to
    value, :func:`.sources.read_constants`) stay out of the pass and are added back after
    it (:func:`kspark_server.chain.with_constants`, docs/design/stateless-chain.md)."""
    from kspark_server.chain import make_chain, with_constants

    out_schema = schema(stage.spec.output_schema)
    run = make_chain(stage.spec)
    if any(isinstance(s, FlatMapStep | FlatMapValuesStep) for s in stage.spec.steps):
        # a fan-out numbers a record's outputs in ks_sub
        constants = {k: v for k, v in constants.items() if k != "ks_sub"}
    if not constants:
        return df.mapInArrow(shipped(run), out_schema)
    described = describe_constants(constants, [name for name, _ in env.ENVELOPE])
    passed = StructType([f for f in out_schema.fields if f.name not in constants])
    out = df.drop(*constants).mapInArrow(shipped(with_constants(run, described)), passed)
    return add_constants(out, out_schema, constants)


def id_stage(df: DataFrame, stage: st.IdStage) -> DataFrame:
    """``df`` with the ``ks_id`` column that ``deduplicate`` repartitions by."""
    from kspark_server.chain import make_id_stage

    return df.mapInArrow(shipped(make_id_stage(stage.spec)), schema(stage.spec.output_schema))


def join_key_stage(df: DataFrame, stage: st.JoinKeyStage) -> DataFrame:
    """``df`` with the ``ks_gkey`` column that a global-table join groups records by."""
    from kspark_server.joinkeys import make_join_key_stage

    return df.mapInArrow(shipped(make_join_key_stage(stage.spec)), schema(stage.spec.output_schema))


def topic_name_stage(df: DataFrame, stage: st.TopicNameStage) -> DataFrame:
    """``df`` with each record's ``topic`` set to the topic its sink's extractor names."""
    from kspark_server.topicnames import make_topic_name_stage

    return df.mapInArrow(
        shipped(make_topic_name_stage(stage.spec)), schema(stage.spec.output_schema)
    )
