"""Reading the ``transform_with_state`` runner's state: Spark's state reader
(``format("statestore")``) over the state variables of ``transformWithStateInPandas``
(:mod:`kspark_server.statevars`), on the server."""

from __future__ import annotations

from typing import Any

from kspark.errors import StoreError


def state_metadata(spark: Any, checkpoint: str) -> list[Any]:
    """The rows of the checkpoint's state metadata (one per stateful operator), or a
    :class:`StoreError` that says why there are none."""
    try:
        return list(spark.read.format("state-metadata").load(checkpoint).collect())
    except Exception as exc:
        raise StoreError(
            f"cannot read the state metadata of checkpoint {checkpoint}: {exc}. Has the app "
            "completed a micro-batch?"
        ) from exc


def _operator_id(spark: Any, checkpoint: str, name: str) -> int:
    """The stateful operator that holds state variable ``name``, from the checkpoint's
    state metadata."""
    rows = state_metadata(spark, checkpoint)
    for r in rows:
        # the operator's properties (a JSON text) list its state variables by name
        props = " ".join(str(v) for v in r.asDict().values())
        if f'"stateName":"{name}"' in props.replace(" ", ""):
            return int(r["operatorId"])
    ids = sorted({int(r["operatorId"]) for r in rows})
    if len(ids) == 1:
        return ids[0]
    raise StoreError(
        f"no operator of checkpoint {checkpoint} holds store {name!r} (operators {ids})"
    )


def _base_change(r: Any) -> tuple[int, int, bytes | None]:
    """(task key, chunk number, chunk or None) of a row of the base's change feed (a map
    state: ``user_map_key`` is the chunk number)."""
    value = r["user_map_value"]
    blob = None if r["change_type"] == "delete" or value is None else value[0]
    return int(r["key"][0]), int(r["user_map_key"][0]), blob


def _state_reader(spark: Any, op: int, var: str) -> Any:
    """Spark's state reader of state variable ``var`` of stateful operator ``op``."""
    return spark.read.format("statestore").option("operatorId", op).option("stateVarName", var)


def _log_reader(spark: Any, op: int, name: str) -> Any:
    """Spark's state reader of store ``name``'s log, each task's list of changes whole."""
    from kspark_server import statevars

    reader = _state_reader(spark, op, statevars.log_name(name))
    return reader.option("flattenCollectionTypes", "false")


def _task_logs(spark: Any, checkpoint: str, op: int, name: str) -> dict[int, list[bytes]]:
    """Each task's log of changes, oldest first."""
    rows = _log_reader(spark, op, name).load(checkpoint).select("key", "list_value").collect()
    return {int(r["key"][0]): [e[0] for e in (r["list_value"] or [])] for r in rows}


def _base_rows(spark: Any, checkpoint: str, op: int, name: str) -> Any:
    """Store ``name``'s base, one row per chunk: ``key`` (the task key), ``blob`` and its
    number ``chunk`` (the ``<store>`` map state, :mod:`kspark_server.statevars`)."""
    from pyspark.sql import functions as F

    raw = _state_reader(spark, op, name).load(checkpoint)
    return raw.select(
        "key",
        F.col("user_map_value.blob").alias("blob"),
        F.col("user_map_key.chunk").alias("chunk"),
    )


def task_frame(spark: Any, checkpoint: str, op: int, name: str) -> Any:
    """A DataFrame of store ``name``'s base chunks, one row each: ``blob`` (the chunk),
    ``first`` (whether it is its task's chunk 0) and ``log`` (the task's changes), read on
    the server with Spark's state reader (:mod:`kspark_server.queries`)."""
    from pyspark.sql import functions as F

    base = _base_rows(spark, checkpoint, op, name).withColumn("first", F.col("chunk") == 0)
    log = _log_reader(spark, op, name).load(checkpoint)
    log = log.select("key", F.col("list_value.blob").alias("log"))
    return base.join(log, "key", "left").select("blob", "first", "log")
