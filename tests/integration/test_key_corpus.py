"""The key corpus (tests/support/keycorpus.py) through every stateful operator on Spark:
keys of 0, 1, 500, 501, 511, 512 and 4096 bytes and of 1 MiB, two long keys that differ
in their last byte only, non-ASCII text and bytes that are not UTF-8, null keys, null
values, and timestamps 0, negative (dropped by ``timestamp_policy="skip"``) and in the
year 9999. tests/unit/test_key_corpus_local.py runs the same corpus in-process, in CI.

Each key follows the same story across four micro-batches: the app's local stores are
wiped before the third (a new executor: every task rebuilds from the checkpoint) and the
app is rescaled from one to two partitions before the fourth. The expected outputs are
Kafka Streams': a key is opaque, so each key's records give the same results as any short
key's would, and a null key is forwarded by deduplication, dropped and counted by
aggregations and inner joins, and joined with a null other side by left and outer joins
(KIP-962). One app holds every operator, so the corpus costs one run.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from support.keycorpus import (
    BYTES_KEYS,
    EXPIRY_SINKS,
    NULL_KEY_DROPS,
    STR_KEYS,
    Out,
    check_sink,
    null_key_drops,
    pipe,
    pipe_expiry,
    topology,
)

from kspark import StreamsConfig
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

#: every operator for str keys; a selection for bytes keys (one app: the corpus costs
#: one run, and each operator more costs Spark minutes)
SINKS = {
    "s": [
        "dedup-key",
        "dedup-kv",
        "dedup-id",
        "count",
        "windowed",
        "final",
        "session",
        "latest-join",
        "versioned-join",
        "inner",
        "left",
        "outer",
        "proc",
        "tables",
        "fk",
        "regrouped",
        "global",
        "global-left",
        "cogroup",
        "sliding",
        "suppress",
    ],
    "b": [
        "dedup-key",
        "count",
        "final",
        "versioned-join",
        "outer",
        "global",
        "cogroup",
        "sliding",
    ],
    "x": EXPIRY_SINKS,
}
KEYS = {"s": STR_KEYS, "b": BYTES_KEYS}


def _wipe_local_stores(spark_server: Any, d: TopologyTestDriver) -> None:
    """What a new executor finds: no local stores, so each task rebuilds its own."""
    if spark_server is None:
        return  # a remote server: its executors' disks are out of reach
    root = d.config.state_dir
    assert root is not None and os.listdir(root), "the operators keep their stores here"
    for name in os.listdir(root) if os.path.isdir(root) else []:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


@pytest.fixture(scope="module")
def corpus_run(spark: Any, spark_server: Any) -> dict[str, Any]:
    """The corpus through the app: each sink's output per batch, the stores' answers and
    the metrics."""
    cfg = StreamsConfig(application_id="key-corpus", num_partitions=1, timestamp_policy="skip")
    outputs: dict[str, list[list[Out]]] = {}
    with TopologyTestDriver(topology(SINKS), cfg, session=spark) as d:
        sinks = {
            f"{p}-{s}": d.create_output_topic(f"{p}-{s}")
            for p, names in SINKS.items()
            for s in names
        }
        for batch in (1, 2, 3, 4):
            if batch == 3:
                _wipe_local_stores(spark_server, d)
            if batch == 4:
                d.rescale(2)
            for p, keys in KEYS.items():
                pipe(d, p, keys, batch)
            pipe_expiry(d, batch)
            d.process()
            for name, sink in sinks.items():
                outputs.setdefault(name, []).append([(r.key, r.value) for r in sink.read_records()])
        stores: dict[str, Any] = {}
        for p, keys in (("s", STR_KEYS), ("b", BYTES_KEYS)):
            count = d.store(f"{p}-count")
            stores[f"{p}-count"] = [count.get(k) for k in keys]
            versioned = d.store(f"{p}-versioned")
            stores[f"{p}-versioned"] = [
                [versioned.get(k, as_of=t) for t in (500, 1_200, 16_000)] for k in keys
            ]
            stores[f"{p}-versioned-keys"] = sorted(k for k, _ in versioned)
            if p == "s":
                stores["s-proc"] = [d.store("s-proc").get(k) for k in keys]
                stores["s-tables"] = [d.store("s-tables").get(k) for k in keys]
                stores["s-fk"] = [d.store("s-fk").get(k) for k in keys]
                stores["s-regrouped"] = [d.store("s-regrouped").get(k) for k in keys]
                stores["s-cogroup"] = [d.store("s-cogroup").get(k) for k in keys]
            replica = d.app.replica(f"{p}-count")
            stores[f"{p}-replica"] = [replica.get(k) for k in keys]
        return {"outputs": outputs, "stores": stores, "metrics": d.metrics()}


@pytest.mark.parametrize("sink", [f"{p}-{s}" for p, names in SINKS.items() for s in names])
def test_each_key_behaves_as_any_key(corpus_run: dict[str, Any], sink: str) -> None:
    p, name = sink.split("-", 1)
    check_sink(corpus_run["outputs"][sink], p, name, KEYS.get(p, []))


def test_stores_replicas_and_rescale_return_the_original_keys(
    corpus_run: dict[str, Any],
) -> None:
    stores = corpus_run["stores"]
    for p, keys in (("s", STR_KEYS), ("b", BYTES_KEYS)):
        assert stores[f"{p}-count"] == [4] * len(keys)
        assert stores[f"{p}-replica"] == [4] * len(keys)
        versions = [
            [None if v is None else (v.value, v.timestamp) for v in row]
            for row in stores[f"{p}-versioned"]
        ]
        assert versions == [
            [(f"{i}:T1", 0), (f"{i}:T2", 1_000), (f"{i}:T3", 15_000)] for i in range(len(keys))
        ]
        assert stores[f"{p}-versioned-keys"] == sorted(keys)
    assert stores["s-proc"] == [5] * len(STR_KEYS)
    assert stores["s-tables"] == [f"{i}:v4+{i}:r1" for i in range(len(STR_KEYS))]
    assert stores["s-fk"] == [f"{i}:v4+{i}:r1" for i in range(len(STR_KEYS))]
    assert stores["s-regrouped"] == [1] * len(STR_KEYS)
    assert stores["s-cogroup"] == [104] * len(STR_KEYS)


def test_null_keys_and_invalid_timestamps_are_counted(corpus_run: dict[str, Any]) -> None:
    reasons = corpus_run["metrics"].dropped_by_reason()
    invalid = sum(n for (_, why), n in reasons.items() if why == "invalid-timestamp")
    assert invalid == len(STR_KEYS) + len(BYTES_KEYS) + 2
    for p, names in SINKS.items():
        if p in KEYS:
            got = {n: c for n, c in null_key_drops(reasons, p).items() if n in names}
            assert got == {n: NULL_KEY_DROPS.get(n, 0) for n in names}
