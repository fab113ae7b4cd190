"""Reading a running app's lease, and the lock of a rescale, from the client.

A running app's writer renews a lease in ``<checkpoint_dir>/lease`` (see
:mod:`kspark_server.lease`); a run that ends marks its token released in
``<checkpoint_dir>/lease-released``. A rescale takes a lock in
``<checkpoint_dir>/rescale-lock``: one JSON file per rescale, ``running`` until it ends.
Everything goes through Spark reads and writes, and ages are measured with the server's
clock, so this works against a remote server as well as the embedded one.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kspark.errors import RescaleError
from kspark.runtime.checkpoints import _exists
from kspark_server.lease import FRESH_MS, lease_dir

__all__ = ["RescaleLock", "check_not_running", "release"]

#: A rescale lock older than this is left over from a rescale that died, and ignored.
LOCK_STALE_MS = 30 * 60 * 1000


def _released_dir(checkpoint_dir: str) -> str:
    return checkpoint_dir.rstrip("/") + "/lease-released"


def release(spark: Any, checkpoint_dir: str, token: str) -> None:
    """Mark the run ``token`` ended: its lease no longer says the app runs."""
    path = f"{_released_dir(checkpoint_dir)}/{token}"
    spark.createDataFrame([(token,)], "value string").coalesce(1).write.mode("overwrite").text(path)


def _now_age(spark: Any, path: str, column: str) -> list[Any]:
    from pyspark.sql import functions as F

    df = spark.read.option("recursiveFileLookup", "true").json(path)
    if column not in df.columns:
        return []
    rows: list[Any] = df.withColumn(
        "age_ms", F.unix_millis(F.current_timestamp()) - F.col(column).cast("long")
    ).collect()
    return rows


def check_not_running(
    spark: Any, checkpoint_dir: str, application_id: str, own: frozenset[str] = frozenset()
) -> None:
    """Raise :class:`RescaleError` if the app's lease says it runs: renewed less than
    ``FRESH_MS`` ago by a run that has not ended (``own`` tokens are the caller's runs,
    which it stopped)."""
    folder = lease_dir(checkpoint_dir)
    if not _exists(spark, folder):
        return
    rows = _now_age(spark, folder, "heartbeat_ms")
    released: set[str] = set()
    if rows and _exists(spark, _released_dir(checkpoint_dir)):
        reader = spark.read.option("recursiveFileLookup", "true")
        released = {r.value for r in reader.text(_released_dir(checkpoint_dir)).collect()}
    for r in rows:
        if r.token in own or r.token in released or r.age_ms is None or r.age_ms >= FRESH_MS:
            continue
        raise RescaleError(
            f"app {application_id} is running: its lease in {folder} was renewed "
            f"{max(r.age_ms, 0) / 1000:.0f}s ago by process {r.pid} on {r.host}; stop it "
            f"before rescaling (StreamsApp.stop(), or `kspark stop --app-id "
            f"{application_id}`). An app stopped from another session keeps its lease "
            f"for up to {FRESH_MS // 1000}s"
        )


class RescaleLock:
    """A rescale's lock on an app's checkpoint: taken when no other rescale holds one,
    released when the rescale ends (either way)."""

    def __init__(self, spark: Any, checkpoint_dir: str, application_id: str) -> None:
        self.spark = spark
        self.folder = checkpoint_dir.rstrip("/") + "/rescale-lock"
        self.application_id = application_id
        self.id = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"

    def _write(self, state: str) -> None:
        from pyspark.sql import functions as F

        # stamped with the server's clock, which the lock's readers compare it with
        now = F.unix_millis(F.current_timestamp()).alias("at_ms")
        (
            self.spark.createDataFrame([(self.id, state)], "id string, state string")
            .select(F.to_json(F.struct("id", "state", now)).alias("value"))
            .coalesce(1)
            .write.mode("overwrite")
            .text(f"{self.folder}/{self.id}")
        )

    def __enter__(self) -> RescaleLock:
        self._write("running")
        # every rescale writes its lock first, then looks for others: of two concurrent
        # ones, each sees the other (or the later one sees the earlier), never neither
        others = [
            r
            for r in _now_age(self.spark, self.folder, "at_ms")
            if r.id != self.id and r.state == "running" and (r.age_ms or 0) < LOCK_STALE_MS
        ]
        if others:
            self._write("refused")
            raise RescaleError(
                f"another rescale of app {self.application_id} is running (lock "
                f"{others[0].id} in {self.folder}, taken {max(others[0].age_ms, 0) / 1000:.0f}s "
                "ago); wait for it to end. A lock older than "
                f"{LOCK_STALE_MS // 60000} minutes is ignored"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._write("done")
