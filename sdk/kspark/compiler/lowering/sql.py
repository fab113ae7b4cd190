"""``filter_expr``: a Spark SQL condition, evaluated in the JVM with no Python pass."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.errors import InvalidTopologyError

__all__ = ["sql_filter"]

#: The envelope's columns while a ``filter_expr`` condition runs beside the value's fields.
_SQL_ENVELOPE = "__kspark_envelope"


def sql_filter(df: DataFrame, stage: st.SqlFilter) -> DataFrame:
    """``df``'s records for which ``stage.condition`` is true, and every side row.

    The condition runs over a projection that has the value's fields as columns (the
    stage's ``scope``), with the envelope kept whole in one struct column beside them and
    restored after the filter. Spark analyses the condition here, so one that does not
    parse, names no column or is no boolean fails the app's start with the processor's
    name, not its first micro-batch.
    """
    value = F.col("value")
    scope = [
        (value.getField(src[len("value.") :]) if src.startswith("value.") else F.col(src)).alias(
            name
        )
        for name, src in stage.scope
    ]
    projected = df.select(F.struct(*[F.col(c) for c in df.columns]).alias(_SQL_ENVELOPE), *scope)
    try:
        condition = F.expr(stage.condition)
        # side rows (dead letters, counts) are no records: they pass, whatever the values
        keep = F.col(f"{_SQL_ENVELOPE}.ks_side").isNotNull() | F.coalesce(condition, F.lit(False))
        out = projected.filter(keep).select(f"{_SQL_ENVELOPE}.*")
        out.schema  # noqa: B018  (analyses the condition now, on the server)
    except AnalysisException as exc:  # ParseException is one too
        names = ", ".join(name for name, _ in stage.scope)
        raise InvalidTopologyError(
            f"{stage.processor}: filter_expr({stage.condition!r}) is not a Spark SQL boolean "
            f"condition over the columns {names}: {_first_line(exc)}",
            processor=stage.processor,
        ) from exc
    return out


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
