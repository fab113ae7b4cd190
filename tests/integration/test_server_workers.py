"""What the embedded server does to keep fixed costs down (docs/design/server-settings.md): its Python
workers import pyspark with its cached bytecode, not from ``pyspark.zip``, which Python
compiles again in every process; its checkpoint files are renamed without forking the
JVM."""

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


def test_checkpoint_files_are_renamed_without_a_child_process(
    spark: Any, spark_server: Any
) -> None:
    if spark_server is None:
        pytest.skip("a remote server's settings are its own")
    # Hadoop's FileContext renames on the local file system by running `readlink` in a
    # child process of the server's JVM (no native Hadoop library in pip's pyspark)
    manager = spark.conf.get("spark.sql.streaming.checkpointFileManagerClass")
    assert manager.endswith(".FileSystemBasedCheckpointFileManager"), manager
