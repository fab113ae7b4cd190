"""Code reaches the server by value: the test server's workers cannot import kspark,
kspark_server or the test modules (tests/support/blocker), yet every behaviour test runs."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _probe(batches: Any) -> Any:
    """What the worker's own installation can import: a reused worker may hold an earlier
    function's kspark_server bundle (kspark.compiler.bundle), which is set aside here."""
    import pyarrow as pa

    for _ in batches:
        bundles = [f for f in sys.meta_path if hasattr(f, "kspark_bundle_digest")]
        ours = [m for m in sys.modules if m.split(".")[0] in ("kspark_server", "kspark")]
        saved = {m: sys.modules.pop(m) for m in ours}
        for f in bundles:
            sys.meta_path.remove(f)
        results = []
        try:
            for name in ("kspark_server", "kspark"):
                try:
                    __import__(name)
                    results.append(f"{name}:importable")
                except ImportError:
                    results.append(f"{name}:missing")
        finally:
            sys.meta_path[0:0] = bundles
            sys.modules.update(saved)
        yield pa.RecordBatch.from_pylist([{"r": ",".join(results)}])


def test_workers_cannot_import_our_packages(spark: Any, request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--spark-remote"):
        pytest.skip("the import blocker is installed only on the embedded test server")
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in")
        spark.range(1).write.parquet(path)
        df = spark.readStream.schema("id long").parquet(path).mapInArrow(_probe, "r string")
        q = (
            df.writeStream.format("memory")
            .queryName("probe_imports")
            .option("checkpointLocation", os.path.join(tmp, "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        (row,) = spark.sql("select r from probe_imports").collect()
    assert row.r == "kspark_server:missing,kspark:missing"
