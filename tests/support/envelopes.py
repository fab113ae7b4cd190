"""Envelope batches as Spark hands them to a fused chain, for in-process chain tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kspark.plan.types import describe_type
from kspark_server import codec, envelope
from kspark_server.transport import arrow_schema


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
