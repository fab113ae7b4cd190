"""Shared helpers of the benchmarks: data, timing and the session."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def args(
    description: str, rows: int = 1_000_000, extra: list[tuple[str, str]] | None = None
) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    for flag, default in extra or []:
        p.add_argument(flag, default=default)
    p.add_argument("--rows", type=int, default=rows)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2, help="timed runs per variant (best is kept)")
    p.add_argument("--remote", default=None, help="sc://host:port (default: embedded server)")
    return p.parse_args()


def workdir() -> str:
    return tempfile.mkdtemp(prefix="kspark-bench-")


def write_events(
    path: str, rows: int, keys: int, files: int, dup_rate: float = 0.0, seed: int = 1
) -> None:
    """Parquet files of (key, value, timestamp): value layout for kspark, plain for Spark."""
    import numpy as np

    rng = np.random.default_rng(seed)
    os.makedirs(path, exist_ok=True)
    per = rows // files
    for f in range(files):
        n = per if f < files - 1 else rows - per * (files - 1)
        base = f * per
        ts = (np.arange(base, base + n) * 10 + rng.integers(0, 5000, n)).astype("int64")
        key_ids = rng.integers(0, keys, n)
        if dup_rate:
            dup = rng.random(n) < dup_rate
            # a duplicate repeats an earlier record's key, a moment later
            src = np.maximum(np.arange(n) - rng.integers(1, 50, n), 0)
            key_ids = np.where(dup, key_ids[src], key_ids)
        table = pa.table(
            {
                "key": pa.array([f"k{k:07d}" for k in key_ids]),
                "value": pa.array(rng.integers(0, 1_000_000, n).astype("int64")),
                "ts": pa.array(ts),
            }
        )
        pq.write_table(table, os.path.join(path, f"part-{f:04d}.parquet"))


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` runs (the first run also warms the workers)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    return path


def run_query(df: Any, out: str, chk: str) -> None:
    q = (
        df.writeStream.format("parquet")
        .option("path", fresh(out))
        .option("checkpointLocation", fresh(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
