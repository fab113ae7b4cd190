"""The embedded server's Python workers import pyspark with its cached bytecode, not from
``pyspark.zip``, which Python compiles again in every process (docs/performance.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.spark


# with separate executor JVMs too: their workers get SPARK_HOME from the worker JVM
@pytest.mark.cluster
def test_workers_import_pyspark_from_site_packages(spark: Any, spark_server: Any) -> None:
    if spark_server is None:
        pytest.skip("a remote server's workers are its own")

    # defined here, so that it travels by value: the test server's workers cannot import
    # the tests' modules
    def _where_pyspark_is(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"path": pyspark.__file__}])

    (row,) = spark.range(1).mapInArrow(_where_pyspark_is, "path string").collect()
    assert ".zip" not in row.path, row.path
    assert row.path.endswith("/pyspark/__init__.py")
