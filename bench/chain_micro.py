"""The Python side of ``passthrough`` and ``handler_overhead``, without Spark: kspark's
compiled chain called in-process on Arrow batches shaped as Spark sends them, against a
plain per-record loop in the same ``mapInArrow`` shape.

    PYTHONPATH=sdk:server_plugin python bench/chain_micro.py [--rows N] [--batch N]

The chain is ``source -> map_values(fn) -> sink`` with an ``int`` value, a dataclass value
(``Event``, as in the Spark benches) and a dynamic value (JSON text, ``fn`` returning a
dict; its plain loop parses and writes the JSON itself), under the default handler and under
``LogAndContinue`` with 1% of the records raising; ``--vectorized`` adds the
``map_values(fn, vectorized=True)`` form, ``--fan-out`` a ``flat_map_values`` that gives
two values per record, against a plain loop that does the same. Each variant runs ``--repeat`` times over the
same batches (default 10,000 rows each, Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``)
and keeps the best CPU time. One core, no JVM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import LogAndContinueProcessingExceptionHandler
from kspark_server import envelope
from kspark_server.chain import make_chain
from kspark_server.transport import arrow_schema

MapInArrow = Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def times10(v: int) -> int:
    return v * 10


def times10_or_fail(v: int) -> int:
    if v % 100 == 0:  # 1% of the values
        raise ValueError(f"bad value {v}")
    return v * 10


def event_times10(e: Event) -> int:
    return e.value * 10


def event_times10_or_fail(e: Event) -> int:
    if e.value % 100 == 0:
        raise ValueError(f"bad value {e.value}")
    return e.value * 10


def json_times10(d):  # type: ignore[no-untyped-def]  # unannotated: a dynamic result
    return {**d, "value": d["value"] * 10}


def json_times10_or_fail(d):  # type: ignore[no-untyped-def]
    if d["value"] % 100 == 0:
        raise ValueError(f"bad value {d['value']}")
    return {**d, "value": d["value"] * 10}


def json_loop(fn: Callable[[Any], Any]) -> MapInArrow:
    """The plain loop over JSON text values: parse, call, write back as sorted JSON."""
    loads = json.loads
    dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

    def run(it: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in it:
            out: list[Any] = []
            keep: list[int] = []
            for i, v in enumerate(batch.column("value").to_pylist()):
                try:
                    out.append(dumps(fn(loads(v))))
                    keep.append(i)
                except Exception:  # the loop under test: a failing record is dropped
                    continue
            if len(keep) != batch.num_rows:
                batch = batch.take(pa.array(keep))
            yield batch.set_column(1, "value", pa.array(out, pa.string()))

    return run


def twice(v: int) -> list[int]:
    return [v, v + 1]


def event_twice(e: Event) -> list[int]:
    return [e.value, e.value + 1]


def vec_times10(v: pa.Array) -> pa.Array:
    return pc.multiply(v, 10)


def batches(value_type: type, rows: int, per_batch: int) -> list[pa.RecordBatch]:
    """The envelope batches a ``layout="value"`` Parquet source hands the chain."""
    from kspark.plan.types import describe_type

    desc = describe_type(value_type)
    schema = arrow_schema(envelope.envelope_json("string", desc.spark_json()))
    rng = np.random.default_rng(1)
    out = []
    for start in range(0, rows, per_batch):
        n = min(per_batch, rows - start)
        keys = pa.array([f"k{k:07d}" for k in rng.integers(0, 100_000, n)])
        nums = pa.array(rng.integers(0, 1_000_000, n).astype("int64"))
        ts = pa.array(np.arange(start, start + n, dtype="int64") * 10)
        value: pa.Array
        if value_type is int:
            value = nums
        elif value_type is dict:  # dynamic: JSON text, as kspark carries it
            value = pa.array(
                json.dumps({"key": k, "ts": t, "value": v}, sort_keys=True, separators=(",", ":"))
                for k, v, t in zip(keys.to_pylist(), nums.to_pylist(), ts.to_pylist(), strict=True)
            )
        else:
            value = pa.StructArray.from_arrays([keys, nums, ts], names=["key", "value", "ts"])
        cols = {
            "key": keys,
            "value": value,
            "timestamp": ts,
            "headers": pa.array([[]] * n, schema.field("headers").type),
            "topic": pa.array(["events"] * n),
            "partition": pa.array(np.zeros(n, dtype="int32")),
            "offset": pa.array(np.arange(start, start + n, dtype="int64")),
            "ks_seq": pa.array(np.arange(start, start + n, dtype="int64")),
            "ks_sub": pa.array(np.zeros(n, dtype="int64")),
            "ks_side": pa.nulls(n, pa.string()),
        }
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.array(cols[f.name], f.type) for f in schema], schema=schema
            )
        )
    return out


def kspark_chain(
    value_type: type, fn: Any, handler: Any, vectorized: bool = False, fan_out: bool = False
) -> MapInArrow:
    """The compiled chain of ``source -> map_values(fn) -> sink`` (``flat_map_values`` with
    ``fan_out``), as Spark would run it."""
    b = StreamsBuilder()
    s = b.stream(Topic.parquet("events", "/tmp/in"), key_type=str, value_type=value_type)
    if fan_out:
        s.flat_map_values(fn, value_type=int).to(Topic.parquet("out", "/tmp/out"))
    elif vectorized:
        s.map_values(fn, vectorized=True, value_type=int).to(Topic.parquet("out", "/tmp/out"))
    elif value_type is dict:  # dynamic in, dynamic out
        s.map_values(fn).to(Topic.parquet("out", "/tmp/out"))
    else:
        s.map_values(fn, value_type=int).to(Topic.parquet("out", "/tmp/out"))
    cfg = StreamsConfig(application_id="micro", processing_exception_handler=handler)
    stage = compile_topology(b.build(), cfg).sinks[0].stage
    assert isinstance(stage, stages.Chain)
    return make_chain(stage.spec)


def plain_loop(value_type: type, fn: Callable[[Any], Any], fan_out: bool = False) -> MapInArrow:
    """A good Spark user's per-record ``mapInArrow``: the value column to Python, one call
    per record in ``try``/``except`` (a failing record is dropped), back to Arrow; with
    ``fan_out``, ``fn`` gives a list of values, each its own row."""

    def run(it: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in it:
            out: list[Any] = []
            keep: list[int] = []
            for i, v in enumerate(batch.column("value").to_pylist()):
                try:
                    if fan_out:
                        values = fn(v)
                        out.extend(values)
                        keep.extend([i] * len(values))
                    else:
                        out.append(fn(v))
                        keep.append(i)
                except Exception:  # the loop under test: a failing record is dropped
                    continue
            if fan_out or len(keep) != batch.num_rows:
                batch = batch.take(pa.array(keep))
            yield batch.set_column(1, "value", pa.array(out, pa.int64()))

    return run


def once(fn: MapInArrow, data: list[pa.RecordBatch]) -> float:
    """CPU time of one run over ``data``, every output batch consumed: this process's
    time, which other jobs on the machine disturb less than wall time."""
    t0 = time.process_time()
    for _ in fn(iter(data)):
        pass
    return time.process_time() - t0


def best_of(fns: list[MapInArrow], data: list[pa.RecordBatch], repeat: int) -> list[float]:
    """Best time of each function, the runs interleaved so that a busy machine slows
    all of them alike."""
    times = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            times[i] = min(times[i], once(fn, data))
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--vectorized", action="store_true", help="add map_values(vectorized=True)")
    p.add_argument("--fan-out", action="store_true", help="add flat_map_values (two per record)")
    p.add_argument("--only", choices=["int", "event", "dynamic"], help="one value type")
    p.add_argument("--profile", choices=["int", "event"], help="cProfile one chain and stop")
    a = p.parse_args()
    # LogAndContinue logs each failure; the Spark bench's workers do not print them either
    logging.disable(logging.WARNING)
    lac = LogAndContinueProcessingExceptionHandler

    if a.profile:
        import cProfile
        import pstats

        vt = int if a.profile == "int" else Event
        data = batches(vt, a.rows, a.batch)
        chain = kspark_chain(vt, times10 if vt is int else event_times10, None)
        prof = cProfile.Profile()
        prof.enable()
        once(chain, data)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        return

    def dict_times10(d: dict[str, Any]) -> int:
        return int(d["value"]) * 10

    def dict_times10_or_fail(d: dict[str, Any]) -> int:
        if d["value"] % 100 == 0:
            raise ValueError(f"bad value {d['value']}")
        return int(d["value"]) * 10

    # per value type: (kspark chain, plain loop) without failures, and with 1% failing
    variants: dict[type, list[tuple[str, MapInArrow]]] = {
        int: [
            ("kspark, default handler", kspark_chain(int, times10, None)),
            ("plain loop", plain_loop(int, times10)),
            ("kspark, LogAndContinue 1%", kspark_chain(int, times10_or_fail, lac)),
            ("plain loop, 1% raising", plain_loop(int, times10_or_fail)),
        ],
        Event: [
            ("kspark, default handler", kspark_chain(Event, event_times10, None)),
            ("plain loop", plain_loop(Event, dict_times10)),
            ("kspark, LogAndContinue 1%", kspark_chain(Event, event_times10_or_fail, lac)),
            ("plain loop, 1% raising", plain_loop(Event, dict_times10_or_fail)),
        ],
    }
    variants[dict] = [
        ("kspark, default handler", kspark_chain(dict, json_times10, None)),
        ("plain loop", json_loop(json_times10)),
        ("kspark, LogAndContinue 1%", kspark_chain(dict, json_times10_or_fail, lac)),
        ("plain loop, 1% raising", json_loop(json_times10_or_fail)),
    ]
    if a.vectorized:
        variants[int].append(
            ("kspark, vectorized", kspark_chain(int, vec_times10, None, vectorized=True))
        )
    if a.fan_out:

        def dict_twice(d: dict[str, Any]) -> list[int]:
            return [int(d["value"]), int(d["value"]) + 1]

        variants[int] += [
            ("kspark, flat_map_values", kspark_chain(int, twice, None, fan_out=True)),
            ("plain loop, two per record", plain_loop(int, twice, fan_out=True)),
        ]
        variants[Event] += [
            ("kspark, flat_map_values", kspark_chain(Event, event_twice, None, fan_out=True)),
            ("plain loop, two per record", plain_loop(Event, dict_twice, fan_out=True)),
        ]
    print(f"{a.rows:,} records in batches of {a.batch:,}, best of {a.repeat}, one core")
    names = {int: "int", Event: "event", dict: "dynamic"}
    for vt, fns in variants.items():
        if a.only and names[vt] != a.only:
            continue
        data = batches(vt, a.rows, a.batch)
        times = best_of([fn for _, fn in fns], data, a.repeat)
        rate = {name: a.rows / t for (name, _), t in zip(fns, times, strict=True)}
        print(f"\nvalue {vt.__name__}")
        for name, r in rate.items():
            print(f"  {name:28s} {r:>14,.0f} records/s")
        default, plain = rate["kspark, default handler"], rate["plain loop"]
        failing = rate["kspark, LogAndContinue 1%"]
        print(f"  ratio kspark / plain loop          {default / plain:.3f}")
        print(
            f"  ratio kspark / plain loop, 1%      {failing / rate['plain loop, 1% raising']:.3f}"
        )
        print(f"  1% failures cost                   {default / failing - 1:+.1%}")
        if "kspark, flat_map_values" in rate:
            fan = rate["kspark, flat_map_values"] / rate["plain loop, two per record"]
            print(f"  ratio kspark / plain loop, fan-out {fan:.3f}")


if __name__ == "__main__":
    main()
