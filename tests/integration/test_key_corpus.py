"""A corpus of awkward keys through every stateful operator: keys of 0, 1, 500, 501, 511,
512 and 4096 bytes and of 1 MiB, two long keys that differ in their last byte only,
non-ASCII text and bytes that are not UTF-8, null keys, null values, and timestamps 0,
negative (dropped by ``timestamp_policy="skip"``) and in the year 9999.

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
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from support.slidingmodel import SlidingModel

from kspark import (
    BufferConfig,
    Deduplicated,
    Joined,
    JoinWindows,
    Materialized,
    Named,
    SessionWindows,
    SlidingWindows,
    StreamJoined,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
    Window,
    Windowed,
)
from kspark.processor import Processor, ProcessorContext, Record
from kspark.state import KeyValueStore, Stores
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

MIB = 1 << 20
#: 9999-12-31T23:59:59Z, the last second of year 9999, in epoch milliseconds
FAR = 253_402_300_799_000
SIZE = 10_000  # the windows' size, ms
SUPPRESS_MS = 10_000  # the suppression's time limit
FAR_START = FAR // SIZE * SIZE

STR_KEYS: list[Any] = [
    "",
    "a",
    "ключ-ü-€-😀",
    "k" * 500,  # with MessagePack's header: the longest key LMDB stores as itself
    "k" * 501,
    "k" * 511,
    "k" * 512,
    "k" * 4096,
    "k" * 4095 + "x",  # differs from the one before in its last byte only
    "m" * MIB,
]
BYTES_KEYS: list[Any] = [
    b"",
    b"\x00",
    b"\xff\xfe\x80\xc3(",  # not UTF-8
    b"\xff" * 512,
    b"\x80" * 4096,
    b"\x00\xff" * (MIB // 2),
]


def _join(a: str | None, b: str | None) -> str:
    return f"{a}+{b}"


class _CountEach(Processor[Any, Any, Any, int]):
    """Counts each key's records in a key-value store and forwards the count; a null
    key (which a store cannot hold) is forwarded with -1."""

    def __init__(self, store: str) -> None:
        self.store = store

    def init(self, context: ProcessorContext[Any, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[Any, int] = context.get_state_store(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.context.forward(record.with_value(-1))
            return
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        self.context.forward(record.with_value(n))


def _branch(b: StreamsBuilder, p: str, key_type: type[Any], full: bool) -> None:
    """The stateful operators over topics ``{p}`` (a stream), ``{p}r`` (the other stream
    of the stream-stream joins), ``{p}l`` and ``{p}v`` (a latest-value and a versioned
    table); each writes to its own topic. ``full``: every operator, else a selection."""
    s = b.stream(p, key_type=key_type, value_type=str)
    every = timedelta(seconds=10)
    s.deduplicate_by_key(every, Deduplicated.as_(f"{p}-dedup-key")).to(f"{p}-dedup-key")
    s.group_by_key().count(Named.as_(f"{p}-count"), Materialized.as_(f"{p}-count")).to_stream().to(
        f"{p}-count"
    )
    window = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=SIZE))
    s.group_by_key().windowed_by(window).count(Named.as_(f"{p}-final")).suppress(
        Suppressed.until_window_closes()
    ).to_stream().to(f"{p}-final")
    versioned = b.table(
        f"{p}v",
        key_type=key_type,
        value_type=str,
        materialized=Materialized.as_versioned(f"{p}-versioned", timedelta(days=1)),
    )
    s.join(versioned, _join, Joined.as_(f"{p}-versioned-join"), value_type=str).to(
        f"{p}-versioned-join"
    )
    right = b.stream(f"{p}r", key_type=key_type, value_type=str)
    windows = JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))
    s.outer_join(
        right,
        _join,
        windows,
        StreamJoined.as_(f"{p}-outer").with_name(f"{p}-outer"),
        value_type=str,
    ).to(f"{p}-outer")
    # a global table, looked up by a selector that returns the awkward key
    rows = b.global_table(
        f"{p}g", key_type=key_type, value_type=str, materialized=Materialized.as_(f"{p}-global")
    )
    s.join(rows, lambda k, v: k, _join, f"{p}-global", value_type=str).to(f"{p}-global")
    # the stream and the other stream into one aggregate
    s.group_by_key().cogroup(lambda k, v, total: total + 1).cogroup(
        right.group_by_key(), lambda k, v, total: total + 100
    ).aggregate(
        lambda: 0, Named.as_(f"{p}-cogroup"), Materialized.as_(f"{p}-cogroup"), value_type=int
    ).to_stream().to(f"{p}-cogroup")
    sliding = SlidingWindows.of_time_difference_without_a_grace(timedelta(milliseconds=SIZE))
    s.group_by_key().windowed_by(sliding).count(Named.as_(f"{p}-sliding")).to_stream().to(
        f"{p}-sliding"
    )
    if not full:
        return
    s.left_join(rows, lambda k, v: k, _join, f"{p}-global-left", value_type=str).to(
        f"{p}-global-left"
    )
    # the Processor API: a processor's own key-value store
    store = f"{p}-proc"
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(store), key_type=key_type, value_type=int
        )
    )
    s.process(lambda: _CountEach(store), store, key_type=key_type, value_type=int).to(f"{p}-proc")
    # a table-table join of the stream's and the other stream's latest values
    stable = s.to_table(Materialized.as_(f"{p}-stable"))
    rtable = right.to_table(Materialized.as_(f"{p}-rtable"))
    stable.outer_join(
        rtable, _join, materialized=Materialized.as_(f"{p}-tables"), value_type=str
    ).to_stream().to(f"{p}-tables")
    # a foreign-key join whose foreign key is the row's own key (the other table's key)
    stable.join(
        rtable,
        foreign_key_extractor=lambda k, v: k,
        joiner=_join,
        materialized=Materialized.as_(f"{p}-fk"),
        value_type=str,
    ).to_stream().to(f"{p}-fk")
    # the table re-grouped by its own key: a row per key while it has a value
    stable.group_by(lambda k, v: (k, v), key_type=key_type, value_type=str).count(
        Named.as_(f"{p}-regrouped"), Materialized.as_(f"{p}-regrouped")
    ).to_stream().to(f"{p}-regrouped")
    # the same id for each value of a key; None (never a duplicate) for a null value
    s.deduplicate_by_key_value(
        lambda k, v: v and "same", every, Deduplicated.as_(f"{p}-dedup-kv")
    ).to(f"{p}-dedup-kv")
    s.deduplicate(lambda k, v: k, every, Deduplicated.as_(f"{p}-dedup-id")).to(f"{p}-dedup-id")
    s.group_by_key().windowed_by(window).count(Named.as_(f"{p}-windowed")).to_stream().to(
        f"{p}-windowed"
    )
    sessions = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=100))
    s.group_by_key().windowed_by(sessions).count(Named.as_(f"{p}-session")).to_stream().to(
        f"{p}-session"
    )
    latest = b.table(
        f"{p}l", key_type=key_type, value_type=str, materialized=Materialized.as_(f"{p}-latest")
    )
    s.left_join(latest, _join, Joined.as_(f"{p}-latest-join"), value_type=str).to(
        f"{p}-latest-join"
    )
    latest.suppress(
        Suppressed.until_time_limit(timedelta(milliseconds=SUPPRESS_MS), BufferConfig.unbounded())
    ).to_stream().to(f"{p}-suppress")
    s.join(
        right,
        _join,
        windows,
        StreamJoined.as_(f"{p}-inner").with_name(f"{p}-inner"),
        value_type=str,
    ).to(f"{p}-inner")
    s.left_join(
        right, _join, windows, StreamJoined.as_(f"{p}-left").with_name(f"{p}-left"), value_type=str
    ).to(f"{p}-left")


def _expiry(b: StreamsBuilder) -> None:
    """Over topic ``x``: a batch of null keys only, which moves stream time past every
    entry, so the local store expires its last entries without a key of the batch."""
    x = b.stream("x", key_type=str, value_type=str)
    for ms in (0, 1_000):
        x.deduplicate_by_key(timedelta(milliseconds=ms)).to(f"x-dedup-{ms}")
    window = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=SIZE))
    x.group_by_key().windowed_by(window).count().to_stream().to("x-windowed")


def topology() -> Any:
    b = StreamsBuilder()
    _branch(b, "s", str, full=True)
    _branch(b, "b", bytes, full=False)
    _expiry(b)
    return b.build()


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
    "x": ["dedup-0", "dedup-1000", "windowed"],
}
#: topic x, per batch: a null key, a key, a null key far later (batches 1 to 3)
EXPIRY = [(None, "n1", 100), ("a", "a1", 200), (None, "n2", 50_000)]

Out = tuple[Any, Any]  # an output record's key and value


def _pipe(d: TopologyTestDriver, p: str, keys: list[Any], batch: int) -> None:
    """Batch ``batch`` (1 to 4) of every key's story, and of the null key's, in time order
    across keys (a topic partition is processed in offset order, and a record behind
    stream time is late for a session). Values are ``"<key number>:<step>"`` (the null
    key's number is ``n``)."""
    sources = {s.topic_name for s in d.topology.sources()}
    topic = {
        t: d.create_input_topic(f"{p}{t}") for t in ("", "r", "l", "v", "g") if p + t in sources
    }
    numbered = [*((str(i), k) for i, k in enumerate(keys)), ("n", None)]
    # per batch: (topic, value or None, timestamp) for each key, one step after the other
    story: dict[int, list[tuple[str, str | None, int]]] = {
        1: [("v", "T1", 0), ("l", "L1", 0), ("r", "r1", 0), ("g", "G1", 0), ("", "v1", 0)],
        2: [("v", "T2", 1_000), ("", "v2", 1_000), ("", None, 1_500), ("", "neg", -1)],
        3: [("v", "T3", 15_000), ("l", None, 15_000), ("g", None, 15_000), ("", "v3", 20_000)],
        4: [("", "v4", FAR)],
    }
    for t, step, ts in story[batch]:
        for n, k in numbered:
            if t in topic:  # "neg": dropped at the source (a negative timestamp)
                topic[t].pipe_input(k, None if step is None else f"{n}:{step}", timestamp=ts)


def _expected(p: str, sink: str, keys: list[Any]) -> list[list[Out]]:
    """Each batch's output of ``sink``, per Kafka Streams, as (key, value) pairs."""

    def each(make: Callable[[str, Any], list[Out]], null: list[Out] = []) -> list[Out]:  # noqa: B006
        out = [o for i, k in enumerate(keys) for o in make(str(i), k)]
        return out + null

    def w(k: Any, start: int, end: int | None = None) -> Windowed[Any]:
        return Windowed(k, Window(start, start + SIZE if end is None else end))

    def forwarded(step: int) -> list[Out]:
        return each(lambda n, k: [(k, f"{n}:v{step}")], [(None, f"n:v{step}")])

    def counted(c: int) -> list[Out]:
        return each(lambda n, k: [(k, c)])

    batches: list[list[Out]]
    if p == "x":  # deduplication forwards every record; the count drops the null keys
        if sink == "windowed":
            return [[], [(w("a", 0), 1)], [], []]
        return [[(k, v)] for k, v, _ in EXPIRY] + [[]]
    if sink in ("dedup-key", "dedup-id"):  # a duplicate within 10 s is dropped
        batches = [forwarded(1), [(None, "n:v2"), (None, None)], forwarded(3), forwarded(4)]
    elif sink == "dedup-kv":  # a null id (here: for a null value) is forwarded
        null_ids = each(lambda n, k: [(k, None)], [(None, "n:v2"), (None, None)])
        batches = [forwarded(1), null_ids, forwarded(3), forwarded(4)]
    elif sink == "proc":  # the processor sees every record, null values too
        minus = (None, -1)
        batches = [
            each(lambda n, k: [(k, 1)], [minus]),
            each(lambda n, k: [(k, 2), (k, 3)], [minus, minus]),
            each(lambda n, k: [(k, 4)], [minus]),
            each(lambda n, k: [(k, 5)], [minus]),
        ]
    elif sink == "tables":  # each batch's last joined row per key (see _last_per_key)
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")]),
            each(lambda n, k: [(k, f"None+{n}:r1")]),  # v2, then a delete of the left row
            each(lambda n, k: [(k, f"{n}:v3+{n}:r1")]),
            each(lambda n, k: [(k, f"{n}:v4+{n}:r1")]),
        ]
    elif sink == "fk":  # an inner join: the left row's delete deletes the result
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")]),
            each(lambda n, k: [(k, None)]),
            each(lambda n, k: [(k, f"{n}:v3+{n}:r1")]),
            each(lambda n, k: [(k, f"{n}:v4+{n}:r1")]),
        ]
    elif sink == "global":  # as of processing: the table's delete ends the matches
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:G1")]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:G1")]),
            [],
            [],
        ]
    elif sink == "global-left":  # a null selected key joins a null table value
        batches = [
            [
                (k, f"{v}+{v[: v.index(':')]}:G1" if k is not None and step < 3 else f"{v}+None")
                for k, v in forwarded(step)
            ]
            for step in (1, 2, 3, 4)
        ]
    elif sink == "cogroup":  # null keys and values are dropped; one row per key a batch
        batches = [counted(c) for c in (101, 102, 103, 104)]
    elif sink == "sliding":  # each key's windows as the reference model's
        model = SlidingModel(SIZE, 0, len)
        steps = [[("K", f"v{s}", ts)] for s, ts in ((1, 0), (2, 1_000), (3, 20_000), (4, FAR))]
        steps[1].append(("K", None, 1_500))
        rows = [sorted(model.batch(step).items()) for step in steps]
        batches = [
            [(Windowed(k, Window(s, e)), c) for k in keys for (_, s, e), (c, _) in r] for r in rows
        ]
    elif sink == "suppress":
        # a time limit of 10 s: the delete at 15 s lets out every key's row buffered
        # since 0. The first key of the task (its records come first) has its delete in
        # its buffered row already; every other key's row goes out as it was, and the
        # delete waits in the buffer, through the rescale, for a later update
        batches = [
            [],
            [],
            [(keys[0], None), *((k, f"{i}:L1") for i, k in enumerate(keys) if i)],
            [],
        ]
    elif sink == "regrouped":  # the count falls to 0 with the delete and stays a row
        batches = [counted(1), counted(0), counted(1), counted(1)]
    elif sink == "count":  # a null key or value is dropped
        batches = [counted(c) for c in (1, 2, 3, 4)]
    elif sink == "windowed":  # a windowed count counts null values too
        batches = [
            each(lambda n, k: [(w(k, 0), 1)]),
            each(lambda n, k: [(w(k, 0), 3)]),
            each(lambda n, k: [(w(k, 20_000), 1)]),
            each(lambda n, k: [(w(k, FAR_START), 1)]),
        ]
    elif sink == "final":  # each window once, when it closes
        batches = [
            [],
            [],
            each(lambda n, k: [(w(k, 0), 3)]),
            each(lambda n, k: [(w(k, 20_000), 1)]),
        ]
    elif sink == "session":  # a gap of 100 ms: each record is a session of its own
        batches = [
            each(lambda n, k: [(w(k, 0, 0), 1)]),
            each(lambda n, k: [(w(k, 1_000, 1_000), 1), (w(k, 1_500, 1_500), 1)]),
            each(lambda n, k: [(w(k, 20_000, 20_000), 1)]),
            each(lambda n, k: [(w(k, FAR, FAR), 1)]),
        ]
    elif sink == "latest-join":  # a left join: a null key joins a null table value
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:L1")], [(None, "n:v1+None")]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:L1")], [(None, "n:v2+None")]),
            each(lambda n, k: [(k, f"{n}:v3+None")], [(None, "n:v3+None")]),
            each(lambda n, k: [(k, f"{n}:v4+None")], [(None, "n:v4+None")]),
        ]
    elif sink == "versioned-join":  # as of each record's time
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:T1")]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:T2")]),
            each(lambda n, k: [(k, f"{n}:v3+{n}:T3")]),
            each(lambda n, k: [(k, f"{n}:v4+{n}:T3")]),
        ]
    elif sink == "inner":
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:r1")]),
            [],
            [],
        ]
    else:  # left and outer: v3 joins nothing, emitted once its window closes (at FAR)
        right_null = [(None, "None+n:r1")] if sink == "outer" else []
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")], [(None, "n:v1+None"), *right_null]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:r1")], [(None, "n:v2+None")]),
            [(None, "n:v3+None")],
            each(lambda n, k: [(k, f"{n}:v3+None")], [(None, "n:v4+None")]),
        ]
    return batches


def _wipe_local_stores(spark_server: Any, d: TopologyTestDriver) -> None:
    """What a new executor finds: no local stores, so each task rebuilds its own."""
    if spark_server is None:
        return  # a remote server: its executors' disks are out of reach
    root = d.config.state_dir
    assert root is not None and os.listdir(root), "the operators keep their stores here"
    for name in os.listdir(root) if os.path.isdir(root) else []:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _key(k: Any) -> Any:
    """A key as it reads back, made comparable: a window's key by its parts."""
    if isinstance(k, Windowed):
        return ("W", k.key, k.window.start, k.window.end)
    return k


def _last_per_key(records: list[Out]) -> list[Out]:
    last: dict[Any, Any] = {}
    for k, v in records:
        last[k] = v
    return list(last.items())


def _short(o: Out) -> str:
    k = o[0].key if isinstance(o[0], Windowed) else o[0]
    return f"({'None' if k is None else f'<{type(k).__name__} of {len(k)}>'}, {o[1]!r})"


@pytest.fixture(scope="module")
def corpus_run(spark: Any, spark_server: Any) -> dict[str, Any]:
    """The corpus through the app: each sink's output per batch, the stores' answers and
    the metrics."""
    cfg = StreamsConfig(application_id="key-corpus", num_partitions=1, timestamp_policy="skip")
    outputs: dict[str, list[list[Out]]] = {}
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
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
            _pipe(d, "s", STR_KEYS, batch)
            _pipe(d, "b", BYTES_KEYS, batch)
            if batch <= len(EXPIRY):
                k, v, ts = EXPIRY[batch - 1]
                d.create_input_topic("x").pipe_input(k, v, timestamp=ts)
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
    keys = BYTES_KEYS if p == "b" else STR_KEYS
    got = corpus_run["outputs"][sink]
    want = _expected(p, name, keys)
    if name in ("tables", "fk", "regrouped", "cogroup"):
        # which side of a batch's updates at one timestamp the join takes first is the
        # task's processing order; the row each key ends the batch with is not
        got = [_last_per_key(g) for g in got]
    for batch, (g, e) in enumerate(zip(got, want, strict=True), start=1):
        # the order across keys within a batch is not Kafka Streams' business here
        g_keys = Counter((_key(k), v) for k, v in g)
        e_keys = Counter((_key(k), v) for k, v in e)
        assert g_keys == e_keys, (
            f"batch {batch}: missing {[_short(o) for o in e if (_key(o[0]), o[1]) not in g_keys]}"
            f", unexpected {[_short(o) for o in g if (_key(o[0]), o[1]) not in e_keys]}"
        )


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
    null_keys = {proc: n for (proc, why), n in reasons.items() if why == "null-key"}
    invalid = sum(n for (_, why), n in reasons.items() if why == "invalid-timestamp")
    print(reasons)
    assert invalid == len(STR_KEYS) + len(BYTES_KEYS) + 2
    assert null_keys
