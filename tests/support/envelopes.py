"""Envelope batches as Spark hands them to a fused chain, for in-process chain tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kspark.plan.types import describe_type
from kspark_server import codec, envelope
from kspark_server.chain import arrow_schema


def envelope_batch(
    key_type: Any, value_type: Any, records: list[tuple[Any, Any]], first: int = 0
) -> pa.RecordBatch:
    """One batch of ``records`` (key, value) of partition 0 of topic ``in``, at offsets
    from ``first`` on, encoded as the chain reads ``key_type`` and ``value_type``."""
    kd, vd = describe_type(key_type), describe_type(value_type)
    schema = arrow_schema(envelope.envelope_json(kd.spark_json(), vd.spark_json()))
    kenc, venc = codec.encoder(kd.spec()), codec.encoder(vd.spec())
    rows = [
        {
            "key": kenc(k),
            "value": venc(v),
            "timestamp": 1000 + i,
            "headers": [],
            "topic": "in",
            "partition": 0,
            "offset": first + i,
            "ks_seq": first + i,
            "ks_sub": 0,
            "ks_side": None,
        }
        for i, (k, v) in enumerate(records)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def udf_chain(spec: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The chain's scalar Arrow UDF (``make_chain_udf``) as a ``mapInArrow`` function: what
    the compiler's plan around it (``kspark.compiler.lower.chain``) makes of its result."""
    from kspark_server.chain import UDF_INPUT, make_chain_udf, udf_outputs

    udf, outputs = make_chain_udf(spec), udf_outputs(spec)
    assert outputs is not None

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(spec.output_schema)
        for batch in batches:
            headers = batch.column("headers")
            args = [
                pc.if_else(pc.greater(pc.list_value_length(headers), 0), headers, None)
                if c == "headers"
                else batch.column(c)
                for c in UDF_INPUT
            ]
            res = udf(*args).to_pylist()
            rows = []
            for row, r in zip(batch.to_pylist(), res, strict=True):
                if r["keep"]:
                    rows.append({**row, **{c: r[c] for c in outputs}})
                rows += [{"ks_side": s} for s in r["sides"] or []]
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return run


def compiled_chain(spec: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The chain as the compiler runs it: its UDF where it has one, else ``mapInArrow``."""
    from kspark_server.chain import make_chain, udf_outputs

    return make_chain(spec) if udf_outputs(spec) is None else udf_chain(spec)
