"""Lowering of stages to Spark Connect DataFrame operations.

This is the only part of the compiler that touches pyspark, and it uses the Spark Connect
client API only: no JVM on the client. One module per kind of stage:

- :mod:`.sources`: a topic's records in envelope form, checked and counted, from
  :mod:`.kafka` (the connector, decoding) or :mod:`.files` (files and tables);
- :mod:`.corrupt` and :mod:`.timestamps`: records that did not parse, and the timestamp
  policy, both turning records into side rows (:mod:`.sides`);
- :mod:`.stateless` and :mod:`.sql`: fused chains of steps, and ``filter_expr``;
- :mod:`.stateful`: the per-task operators' inputs, and :mod:`.grouped`: the operators,
  all of an app's in one ``applyInPandasWithState``;
- :mod:`.sinks`: the union of the sinks and the ``foreachBatch`` writer;
- :mod:`.build`: the entry point, :func:`build_dataframe`.
"""

from __future__ import annotations

from kspark.compiler.lowering.build import build_dataframe
from kspark.compiler.lowering.columns import flat_schema
from kspark.compiler.lowering.kafka import kafka_format
from kspark.compiler.lowering.sinks import SIDE_METRICS, writer_function
from kspark.compiler.lowering.sources import INPUT_METRICS_PREFIX

__all__ = [
    "INPUT_METRICS_PREFIX",
    "SIDE_METRICS",
    "build_dataframe",
    "flat_schema",
    "kafka_format",
    "writer_function",
]
