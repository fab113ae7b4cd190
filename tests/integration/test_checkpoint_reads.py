"""An app start reads its checkpoint in as few calls to the server as it can: each read
says itself that a folder is missing, with no call first to check (docs/performance.md:
a restart's fixed costs)."""

from __future__ import annotations

from typing import Any

import pytest

from kspark.runtime.checkpoints import (
    Generation,
    current_generation,
    last_committed,
    write_generation,
)

pytestmark = pytest.mark.spark


class Counting:
    """``spark``, counting the reads started through it."""

    def __init__(self, spark: Any) -> None:
        self.spark, self.reads = spark, 0

    @property
    def read(self) -> Any:
        self.reads += 1
        return self.spark.read


def test_one_read_each_whether_the_folder_exists_or_not(spark: Any, tmp_path: Any) -> None:
    chk = str(tmp_path / "app")
    counting = Counting(spark)
    assert current_generation(counting, chk).number == 0  # no generations folder yet
    assert last_committed(counting, f"{chk}/query") is None  # no commit log yet
    assert counting.reads == 2

    write_generation(spark, chk, Generation(number=3, checkpoint=f"{chk}/query-g3"))
    data = str(tmp_path / "in")
    spark.createDataFrame([(1,)], "x long").write.parquet(data)
    query = (
        spark.readStream.schema("x long")
        .parquet(data)
        .writeStream.format("noop")
        .option("checkpointLocation", f"{chk}/query-g3")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    counting.reads = 0
    assert current_generation(counting, chk).number == 3
    assert last_committed(counting, f"{chk}/query-g3") == 0
    assert counting.reads == 2
