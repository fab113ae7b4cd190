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
(KIP-962). The operators are spread over a few apps of a few operators each: with
several stateful operators, an app sends each one's output through an internal topic
(docs/design/sub-topologies.md), and the cost of each micro-batch, and of a rescale, grows
with the operators of the app.
"""

from __future__ import annotations

import contextlib
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

#: every operator for str keys; a selection for bytes keys. Each dict is one app (its
#: sinks per prefix): apps of a few operators each keep each micro-batch's and the
#: rescale's cost down (see the module doc)
APPS: list[dict[str, list[str]]] = [
    {"s": ["dedup-key", "dedup-kv", "dedup-id", "count", "proc", "latest-join", "suppress"]},
    {"s": ["windowed", "final", "session", "sliding", "cogroup"], "x": EXPIRY_SINKS},
    {"s": ["versioned-join", "inner", "left", "outer", "global", "global-left"]},
    {"s": ["tables", "fk", "regrouped"]},
    {
        "b": [
            "dedup-key",
            "count",
            "final",
            "versioned-join",
            "outer",
            "global",
            "cogroup",
            "sliding",
        ]
    },
]
#: every app's sinks per prefix
SINKS: dict[str, list[str]] = {
    p: [s for app in APPS for s in app.get(p, [])] for p in ("s", "b", "x")
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
    """The corpus through the apps: each sink's output per batch, the stores' answers and
    each app's records dropped per (processor, reason)."""
    outputs: dict[str, list[list[Out]]] = {}
    stores: dict[str, Any] = {}
    reasons: list[dict[tuple[str, str], int]] = []
    with contextlib.ExitStack() as stack:
        drivers = []
        for n, sinks in enumerate(APPS):
            cfg = StreamsConfig(
                application_id=f"key-corpus-{n}", num_partitions=1, timestamp_policy="skip"
            )
            d = stack.enter_context(TopologyTestDriver(topology(sinks), cfg, session=spark))
            drivers.append((d, sinks))
        for d, sinks in drivers:
            topics = {
                f"{p}-{s}": d.create_output_topic(f"{p}-{s}")
                for p, names in sinks.items()
                for s in names
            }
            for batch in (1, 2, 3, 4):
                if batch == 3:
                    _wipe_local_stores(spark_server, d)
                if batch == 4:
                    d.rescale(2)
                for p, keys in KEYS.items():
                    if p in sinks:
                        pipe(d, p, keys, batch)
                if "x" in sinks:
                    pipe_expiry(d, batch)
                d.process()
                for name, topic in topics.items():
                    outputs.setdefault(name, []).append(
                        [(r.key, r.value) for r in topic.read_records()]
                    )
            _read_stores(d, sinks, stores)
            reasons.append(d.metrics().dropped_by_reason())
    return {"outputs": outputs, "stores": stores, "reasons": reasons}


def _read_stores(d: TopologyTestDriver, sinks: dict[str, list[str]], into: dict[str, Any]) -> None:
    """The answers of the stores of the app that ``d`` runs (``sinks``: its sinks)."""
    for p, keys in KEYS.items():
        names = sinks.get(p, [])
        if "count" in names:
            into[f"{p}-count"] = [d.store(f"{p}-count").get(k) for k in keys]
            replica = d.app.replica(f"{p}-count")
            into[f"{p}-replica"] = [replica.get(k) for k in keys]
        if "versioned-join" in names:
            versioned = d.store(f"{p}-versioned")
            into[f"{p}-versioned"] = [
                [versioned.get(k, as_of=t) for t in (500, 1_200, 16_000)] for k in keys
            ]
            into[f"{p}-versioned-keys"] = sorted(k for k, _ in versioned)
        for name in ("proc", "tables", "fk", "regrouped", "cogroup"):
            if name in names:
                into[f"{p}-{name}"] = [d.store(f"{p}-{name}").get(k) for k in keys]


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
    for app, reasons in zip(APPS, corpus_run["reasons"], strict=True):
        # each app reads the stream of each of its prefixes: a negative timestamp per key
        # and one for the null key
        invalid = sum(n for (_, why), n in reasons.items() if why == "invalid-timestamp")
        assert invalid == sum(len(KEYS[p]) + 1 for p in app if p in KEYS)
        for p, names in app.items():
            if p in KEYS:
                got = {n: c for n, c in null_key_drops(reasons, p).items() if n in names}
                assert got == {n: NULL_KEY_DROPS.get(n, 0) for n in names}
