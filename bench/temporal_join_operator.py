"""The Python side of ``temporal_join``, without Spark: one task's micro-batch of the
versioned-table join, called in-process, its values JSON text as the lowering packs them.

    PYTHONPATH=sdk:server_plugin python bench/temporal_join_operator.py [--payments N]

A task of ``temporal_join --rows 500000`` on ``local[2]`` (4 tasks) at 10,000 table keys:
125,000 payments and 2,500 keys x 50 versions of a rate, the table's changelog in time
order, into empty state. It runs the join as it runs in an app (the as-of lookups a batch
at a time, then the joiner per payment) and its record-by-record path, ``--repeat`` times
each, alternately, and keeps each one's best CPU time of ``run_task`` (the join, and the
state writes to the local store and the task's files). Then it times the payments' decoding alone: each JSON text parsed and made a dataclass
(the operator's record decoder), parsed only, and decoded straight into the dataclass by
msgspec a column at a time. One core, no JVM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from kspark_server import envelope as env
from kspark_server import localstore, placement
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.spec import JoinSpec, KeyValue, Packed, PrimSpec, RecordSpec
from kspark_server.taskfiles import TaskFiles

STR, LONG, DOUBLE = PrimSpec(spark="string"), PrimSpec(spark="long"), PrimSpec(spark="double")


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


@dataclasses.dataclass
class Rate:
    key: str
    rate: float
    ts: int


EVENT = RecordSpec(cls=Event, fields=(("key", STR), ("value", LONG), ("ts", LONG)))
RATE = RecordSpec(cls=Rate, fields=(("key", STR), ("rate", DOUBLE), ("ts", LONG)))


def convert(p: Event, r: Rate | None) -> float:
    return p.value * (r.rate if r is not None else 0.0)


def spec() -> JoinSpec:
    return JoinSpec(
        processor="JOIN",
        store="rates",
        left=True,
        versioned=True,
        history_retention_ms=int(timedelta(days=365).total_seconds() * 1000),
        grace_ms=0,
        joiner=convert,
        joiner_with_key=False,
        stream=KeyValue(key=STR, value=EVENT),
        table=KeyValue(key=STR, value=RATE),
        output=KeyValue(key=STR, value=DOUBLE),
        output_schema=env.envelope_json("string", "double"),
        packed=Packed(value=True, tvalue=True),
    )


def batch(payments: int, keys: int, versions: int) -> pa.Table:
    """One task's input rows: the payments and the rates, each topic in time order."""
    rng = np.random.default_rng(7)
    span = payments * 10
    p_key = rng.integers(0, keys, payments)
    p_ts = np.sort(rng.integers(0, span, payments))
    r_key = np.tile(np.arange(keys), versions)
    r_ts = np.repeat(np.linspace(0, span, versions).astype("int64"), keys)
    n_p, n_r = payments, keys * versions

    def text(k: Any, **fields: Any) -> str:
        return json.dumps({"key": f"k{k:07d}", **fields}, separators=(",", ":"))

    p_val = [
        text(k, value=int(v), ts=int(t)) for k, v, t in zip(p_key, p_ts % 997, p_ts, strict=True)
    ]
    r_val = [
        text(k, rate=float(x), ts=int(t))
        for k, x, t in zip(r_key, rng.random(n_r), r_ts, strict=True)
    ]
    n = n_p + n_r
    keys_col = [f"k{k:07d}" for k in p_key] + [f"k{k:07d}" for k in r_key]
    return pa.table(
        {
            "key": pa.array(keys_col),
            "value": pa.array(p_val + [None] * n_r, pa.string()),
            "timestamp": pa.array(np.concatenate([p_ts, r_ts])),
            "headers": pa.nulls(n),
            "topic": pa.array(["payments"] * n_p + ["rates"] * n_r),
            "partition": pa.array(np.zeros(n, "int32")),
            "offset": pa.array(np.concatenate([np.arange(n_p), np.arange(n_r)])),
            "ks_seq": pa.array(np.arange(n)),
            "ks_sub": pa.array(np.zeros(n, "int64")),
            "ks_side": pa.nulls(n, pa.string()),
            "ks_tvalue": pa.array([None] * n_p + r_val, pa.string()),
            "ks_jside": pa.array(np.repeat(np.array([0, 1], "int32"), [n_p, n_r])),
            "ks_hash": pa.array(np.zeros(n, "int32")),
            "ks_task": pa.array(np.zeros(n, "int32")),
        }
    )


def once(table: pa.Table, columnar: bool, root: str) -> float:
    """CPU seconds of one batch into empty state."""
    os.environ["KSPARK_LOCAL_STATE_DIR"] = os.path.join(root, "local")
    proc = JoinProcessor(spec())
    if not columnar:
        proc._process_asof = lambda *a: False  # type: ignore[method-assign]
    proc.attach(TaskFiles(os.path.join(root, "files"), "rates", 0, None))
    start = time.process_time()
    proc.run_task((placement.task_keys(1)[0],), table)
    took = time.process_time() - start
    for store in list(localstore._registry().values()):
        store.close()
    return took


def batch_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of one task's batch, shared with ``temporal_join_worker``."""
    p.add_argument("--payments", type=int, default=125_000)
    p.add_argument("--keys", type=int, default=2_500)
    p.add_argument("--versions", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3)
    return p


def main() -> None:
    a = batch_arguments(argparse.ArgumentParser(description=__doc__)).parse_args()
    table = batch(a.payments, a.keys, a.versions)
    best = {True: float("inf"), False: float("inf")}
    for _ in range(a.repeat):
        for columnar in (True, False):
            with tempfile.TemporaryDirectory(prefix="kspark-bench-") as root:
                best[columnar] = min(best[columnar], once(table, columnar, root))
    n = a.payments + a.keys * a.versions
    print(f"{a.payments:,} payments, {a.keys:,} keys x {a.versions} versions ({n:,} records)")
    for columnar, name in ((True, "as-of lookups a batch at a time"), (False, "record by record")):
        print(f"{name:35s} {best[columnar]:6.2f} s CPU  {n / best[columnar]:>10,.0f} records/s")
    decoding(table, a.repeat)


def decoding(table: pa.Table, repeat: int) -> None:
    """Best CPU time per payment of three ways to decode the payments' JSON texts."""
    import msgspec

    from kspark_server import codec

    texts = table.column("value").drop_null().to_pylist()
    record = codec.decoder(EVENT, plain=True)
    parse = msgspec.json.decode
    typed = msgspec.json.Decoder(Event).decode_lines
    ways = {
        "parsed and made a dataclass": lambda: [record(parse(t)) for t in texts],
        "parsed only": lambda: [parse(t) for t in texts],
        "msgspec into the dataclass, a column": lambda: typed("\n".join(texts)),
    }
    for name, fn in ways.items():
        best = float("inf")
        for _ in range(repeat):
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
        print(f"decoding a payment: {name:37s} {best / len(texts) * 1e6:5.2f} us")


if __name__ == "__main__":
    main()
