"""The key corpus (tests/support/keycorpus.py) through every stateful operator, on the
test driver's in-process engine: dedup x3, aggregations, time, session and sliding
windows, suppression, cogroup, stream-table joins (latest and versioned, inner and left),
stream-stream joins, table-table and foreign-key joins, a table's re-grouping, global
tables and the Processor API's key-value, window and versioned stores, with str and
bytes keys, and the stores read back by interactive queries.

Each key's story runs over four micro-batches; the driver restarts (new operators, empty
local stores rebuilt from the durable state) before the third and the fourth. The same
corpus runs on Spark, with a rescale, in tests/integration/test_key_corpus.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.keycorpus import (
    BYTES_KEYS,
    EXPIRY_SINKS,
    FAR,
    FAR_START,
    NULL_KEY_DROPS,
    OPERATORS,
    STR_KEYS,
    TWINS,
    WINDOW,
    Out,
    check_sink,
    null_key_drops,
    pipe,
    pipe_expiry,
    topology,
)

from kspark import Materialized, Named, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import StreamsAppError
from kspark.testing import TopologyTestDriver
from kspark_server import placement

SINKS = {"s": list(OPERATORS), "b": list(OPERATORS), "x": EXPIRY_SINKS}
KEYS = {"s": STR_KEYS + TWINS["s"], "b": BYTES_KEYS + TWINS["b"]}


@pytest.fixture(scope="module")
def corpus_run() -> dict[str, Any]:
    """Every operator over the corpus: each sink's output per batch, the stores' answers
    and the metrics."""
    cfg = StreamsConfig(application_id="key-corpus", num_partitions=1, timestamp_policy="skip")
    outputs: dict[str, list[list[Out]]] = {}
    with TopologyTestDriver(topology(SINKS), cfg, engine="local") as d:
        sinks = {
            f"{p}-{s}": d.create_output_topic(f"{p}-{s}")
            for p, names in SINKS.items()
            for s in names
        }
        for batch in (1, 2, 3, 4):
            if batch >= 3:
                assert d._local is not None
                d._local.restart()  # new executors: the local stores rebuild
            for p, keys in KEYS.items():
                pipe(d, p, keys, batch)
            pipe_expiry(d, batch)
            d.process()
            for name, sink in sinks.items():
                outputs.setdefault(name, []).append([(r.key, r.value) for r in sink.read_records()])
        stores: dict[str, Any] = {}
        for p, keys in KEYS.items():
            for name in ("count", "reduce", "aggregate", "proc", "cogroup", "regrouped"):
                store = d.get_key_value_store(f"{p}-{name}")
                stores[f"{p}-{name}"] = [store.get(k) for k in keys]
                if name == "proc":  # the Processor API's store iterates: all()
                    stores[f"{p}-proc-keys"] = sorted(k for k, _ in store.all())
            for name in ("tables", "tables-inner", "tables-left", "fk", "fk-left"):
                stores[f"{p}-{name}"] = [d.store(f"{p}-{name}").get(k) for k in keys]
            versioned = d.get_versioned_key_value_store(f"{p}-versioned")
            stores[f"{p}-versioned"] = [
                [versioned.get(k, as_of=t) for t in (500, 1_200, 16_000)] for k in keys
            ]
            stores[f"{p}-versioned-keys"] = sorted(k for k, _ in versioned)
            proc_versioned = d.get_versioned_key_value_store(f"{p}-proc-versioned")
            stores[f"{p}-proc-versioned"] = [proc_versioned.get(k) for k in keys]
            for name in ("windowed", "proc-window"):
                windows = d.get_window_store(f"{p}-{name}")
                stores[f"{p}-{name}"] = [windows.fetch(k, FAR_START, FAR_START) for k in keys]
            sessions = d.get_session_store(f"{p}-session")
            stores[f"{p}-session"] = [sessions.fetch(k) for k in keys]
        return {"outputs": outputs, "stores": stores, "metrics": d.metrics()}


@pytest.mark.parametrize("sink", [f"{p}-{s}" for p, names in SINKS.items() for s in names])
def test_each_key_behaves_as_any_key(corpus_run: dict[str, Any], sink: str) -> None:
    p, name = sink.split("-", 1)
    check_sink(corpus_run["outputs"][sink], p, name, KEYS.get(p, []))


def test_stores_return_the_original_keys(corpus_run: dict[str, Any]) -> None:
    """Interactive queries find each key, the 1 MiB twins apart, by its original value."""
    stores = corpus_run["stores"]
    for p, keys in KEYS.items():
        n = len(keys)
        assert stores[f"{p}-count"] == [4] * n
        assert stores[f"{p}-aggregate"] == [4] * n
        assert stores[f"{p}-reduce"] == [f"{i}:v1|{i}:v2|{i}:v3|{i}:v4" for i in range(n)]
        assert stores[f"{p}-proc"] == [5] * n
        assert stores[f"{p}-cogroup"] == [104] * n
        assert stores[f"{p}-regrouped"] == [1] * n
        for name in ("tables", "tables-inner", "tables-left", "fk", "fk-left"):
            assert stores[f"{p}-{name}"] == [f"{i}:v4+{i}:r1" for i in range(n)], name
        versions = [
            [None if v is None else (v.value, v.timestamp) for v in row]
            for row in stores[f"{p}-versioned"]
        ]
        assert versions == [
            [(f"{i}:T1", 0), (f"{i}:T2", 1_000), (f"{i}:T3", 15_000)] for i in range(n)
        ]
        for name in ("versioned", "proc"):
            assert stores[f"{p}-{name}-keys"] == sorted(keys), name  # iteration's keys
        latest = [(v.value, v.valid_from) for v in stores[f"{p}-proc-versioned"]]
        assert latest == [(f"{i}:v4", FAR) for i in range(n)]
        assert stores[f"{p}-windowed"] == [[(FAR_START, 1)]] * n
        assert stores[f"{p}-proc-window"] == [[(FAR_START, 1)]] * n
        assert all(s[-1] == (FAR, FAR, 1) for s in stores[f"{p}-session"])


def test_null_keys_and_invalid_timestamps_are_counted(corpus_run: dict[str, Any]) -> None:
    """Each aggregation and join counts its null-key records as dropped, with the reason;
    deduplication, the Processor API and outer joins drop none; a negative timestamp is
    dropped at the source."""
    reasons = corpus_run["metrics"].dropped_by_reason()
    for p in KEYS:
        assert null_key_drops(reasons, p) == {n: NULL_KEY_DROPS.get(n, 0) for n in OPERATORS}
    invalid = sum(n for (_, why), n in reasons.items() if why == "invalid-timestamp")
    assert invalid == len(KEYS["s"]) + len(KEYS["b"]) + 2


@pytest.mark.parametrize("key", ["", "k" * (1 << 20), None, "ключ"])
def test_a_negative_timestamp_stops_the_app_when_the_policy_says_so(key: Any) -> None:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=str).group_by_key().count(
        materialized=Materialized.as_("n")
    ).to_stream().to("out")
    cfg = StreamsConfig(application_id="key-corpus-fail", num_partitions=1, timestamp_policy="fail")
    with TopologyTestDriver(b.build(), cfg, engine="local") as d:
        src = d.create_input_topic("in")
        src.pipe_input(key, "v", timestamp=0)
        d.process()
        src.pipe_input(key, "v", timestamp=-1)
        with pytest.raises(StreamsAppError, match="invalid timestamp"):
            d.process()


# -- Spark's hash of a long key ----------------------------------------------------------
#
# The in-process engine places each record by Spark's hash of its key, once per stateful
# operator and sink; the corpus's 1 MiB keys took minutes with a word-by-word hash. A long
# value's words are mixed with NumPy and its hash kept: the same hash as word by word.


def _words_hash(data: bytes, seed: int) -> int:
    """Spark's hashUnsafeBytes, word by word: the reference."""
    n, aligned, h1 = len(data), len(data) - len(data) % 4, seed & placement._MASK
    for i in range(0, aligned, 4):
        h1 = placement._mix_h1(h1, placement._mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for b in data[aligned:]:
        h1 = placement._mix_h1(h1, placement._mix_k1(b - 256 if b > 127 else b))
    return placement._fmix(h1, n)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=700), seed=st.integers(-(2**31), 2**31 - 1))
def test_a_long_values_hash_is_the_word_by_word_hash(data: bytes, seed: int) -> None:
    want = _words_hash(data, seed)
    assert placement._hash_bytes(data, seed) == want
    assert placement._hash_bytes(data, seed) == want  # kept, for a long value


def test_two_long_keys_that_differ_in_their_last_byte_hash_apart() -> None:
    hasher = placement.spark_hasher("binary")
    for a, b in zip(
        TWINS["b"], [k for k in BYTES_KEYS if len(k) == len(TWINS["b"][0])], strict=True
    ):
        assert a[:-1] == b[:-1] and a != b
        assert (hasher(a, 42), hasher(b, 42)) == (_words_hash(a, 42), _words_hash(b, 42))
        assert hasher(a, 42) != hasher(b, 42)


def test_every_drop_is_dead_lettered_with_its_key_as_json_text() -> None:
    """With ``dead_letter_dropped_records``, each record that a count (whose whole batch
    runs at once) or the source drops reaches the dead-letter queue, a ``bytes`` key as
    the JSON string of its base64, as Spark's ``to_json`` writes binary."""
    b = StreamsBuilder()
    s = b.stream("in", key_type=bytes, value_type=str)
    s.group_by_key().count(Named.as_("count")).to_stream().to("count")
    s.group_by_key().windowed_by(WINDOW).count(Named.as_("windowed")).to_stream().to("windowed")
    cfg = StreamsConfig(
        application_id="key-corpus-dlq",
        num_partitions=1,
        timestamp_policy="skip",
        dead_letter_queue_topic=Topic.parquet("dlq", "/unused/dlq"),
        dead_letter_dropped_records=True,
    )
    keys = [b"\xff\xfe\x80", TWINS["b"][0], None]
    with TopologyTestDriver(b.build(), cfg, engine="local") as d:
        src = d.create_input_topic("in")
        for k in keys:
            src.pipe_input(k, None, timestamp=0)  # a null value: dropped by the count
            src.pipe_input(k, "v", timestamp=-1)  # dropped by the source
            src.pipe_input(k, "v", timestamp=5)
        d.process()
        dead = d.dead_letter_topic().read_records()
        dropped = d.metrics().dropped_by_reason()
    assert dropped == {
        ("KSTREAM-SOURCE-0000000000", "invalid-timestamp"): 3,
        ("count", "null-value"): 2,
        ("count", "null-key"): 2,
        ("windowed", "null-key"): 2,
    }
    assert len(dead) == 9
    texts = {json.dumps(base64.b64encode(k).decode()) for k in keys if k is not None}
    assert {r.key for r in dead} == {*texts, None}


def test_long_keys_whose_digests_collide_keep_their_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local stores place a long key by a digest and tell keys apart by the full key:
    with one digest for every long key, every operator still gives each long key (of
    501 bytes to 4 KiB, the 4 KiB twins among them) its own results, before and after a
    restart."""
    from kspark_server.localstore import SHORT_KEY, TaskStore

    monkeypatch.setattr(TaskStore, "digest", staticmethod(lambda k: b"\x00"))
    long = {
        p: [k for k in keys if k is not None and SHORT_KEY < len(k) <= 4096]
        for p, keys in KEYS.items()
    }
    sinks = {p: list(OPERATORS) for p in long}
    cfg = StreamsConfig(
        application_id="key-corpus-digest", num_partitions=1, timestamp_policy="skip"
    )
    outputs: dict[str, list[list[Out]]] = {}
    with TopologyTestDriver(topology(sinks), cfg, engine="local") as d:
        topics = {f"{p}-{s}": d.create_output_topic(f"{p}-{s}") for p in sinks for s in sinks[p]}
        for batch in (1, 2, 3, 4):
            if batch >= 3:
                assert d._local is not None
                d._local.restart()
            for p, keys in long.items():
                pipe(d, p, keys, batch)
            d.process()
            for name, topic in topics.items():
                outputs.setdefault(name, []).append(
                    [(r.key, r.value) for r in topic.read_records()]
                )
        counts = {
            p: [d.get_key_value_store(f"{p}-count").get(k) for k in keys]
            for p, keys in long.items()
        }
    for name, got in outputs.items():
        p, sink = name.split("-", 1)
        check_sink(got, p, sink, long[p])
    assert counts == {p: [4] * len(keys) for p, keys in long.items()}
