"""A corpus of awkward keys through every stateful operator, shared by the in-process run
(tests/unit/test_key_corpus_local.py, in CI) and the run on Spark
(tests/integration/test_key_corpus.py, with a rescale).

The corpus: keys of 0, 1, 500, 501, 511, 512 and 4096 bytes and of 1 MiB, pairs of long
keys (4 KiB and 1 MiB) that differ in their last byte only, non-ASCII text and bytes that
are not UTF-8, null keys, null values, and timestamps 0, negative (dropped by
``timestamp_policy="skip"``) and in the year 9999.

Each operator is one factory in :data:`OPERATORS` (its sink is ``{prefix}-{name}``); each
key follows the same story (:func:`pipe`) across four micro-batches, and
:func:`expected` gives each batch's output per Kafka Streams: a key is opaque, so each
key's records give the same results as any short key's would, and a null key is
forwarded by deduplication, dropped and counted by aggregations and inner joins
(:data:`NULL_KEY_DROPS`), and joined with a null other side by left and outer joins
(KIP-962).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import cached_property
from typing import Any

from support.slidingmodel import SlidingModel

from kspark import (
    BufferConfig,
    Deduplicated,
    Grouped,
    Joined,
    JoinWindows,
    Materialized,
    Named,
    SessionWindows,
    SlidingWindows,
    StreamJoined,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Window,
    Windowed,
)
from kspark.processor import Processor, ProcessorContext, Record
from kspark.state import KeyValueStore, Stores, VersionedKeyValueStore, WindowStore
from kspark.testing import TopologyTestDriver

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
#: two more 1 MiB keys, each differing from one above in its last byte only
TWINS: dict[str, list[Any]] = {
    "s": ["m" * (MIB - 1) + "n"],
    "b": [b"\x00\xff" * (MIB // 2 - 1) + b"\x00\xfe"],
}
KEY_TYPES: dict[str, type[Any]] = {"s": str, "b": bytes}

#: topic x, per batch: a null key, a key, a null key far later (batches 1 to 3)
EXPIRY = [(None, "n1", 100), ("a", "a1", 200), (None, "n2", 50_000)]
EXPIRY_SINKS = ["dedup-0", "dedup-1000", "windowed"]

Out = tuple[Any, Any]  # an output record's key and value


def _join(a: str | None, b: str | None) -> str:
    return f"{a}+{b}"


# -- the Processor API's stores ------------------------------------------------------------


class CountEach(Processor[Any, Any, Any, int]):
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


class CountEachWindow(Processor[Any, Any, Any, int]):
    """Counts each key's records per window of :data:`SIZE` in a window store and
    forwards the count; a null key is forwarded with -1."""

    def __init__(self, store: str) -> None:
        self.store = store

    def init(self, context: ProcessorContext[Any, int]) -> None:
        self.context = context
        self.windows: WindowStore[Any, int] = context.get_state_store(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.context.forward(record.with_value(-1))
            return
        start = record.timestamp // SIZE * SIZE
        n = 1 + sum(c for _, c in self.windows.fetch(record.key, start, start))
        self.windows.put(record.key, n, start)
        self.context.forward(record.with_value(n))


class PreviousVersion(Processor[Any, Any, Any, str]):
    """Keeps each record's value in a versioned store and forwards the key's value as of
    just before the record (``"None"`` for none); a null key is forwarded as
    ``"null-key"``."""

    def __init__(self, store: str) -> None:
        self.store = store

    def init(self, context: ProcessorContext[Any, str]) -> None:
        self.context = context
        self.versions: VersionedKeyValueStore[Any, str] = context.get_state_store(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.context.forward(record.with_value("null-key"))
            return
        before = self.versions.get(record.key, record.timestamp - 1)
        self.versions.put(record.key, record.value, record.timestamp)
        self.context.forward(record.with_value(str(None if before is None else before.value)))


# -- one factory per operator ----------------------------------------------------------------


class Inputs:
    """The inputs of one prefix's operators, each made at its first use: topics ``{p}``
    (a stream), ``{p}r`` (the other stream of the stream-stream joins and the cogroup),
    ``{p}l`` and ``{p}v`` (a latest-value and a versioned table) and ``{p}g`` (a global
    table)."""

    def __init__(self, b: StreamsBuilder, p: str) -> None:
        self.b, self.p, self.key_type = b, p, KEY_TYPES[p]

    def name(self, sink: str) -> str:
        return f"{self.p}-{sink}"

    @cached_property
    def s(self) -> Any:
        return self.b.stream(self.p, key_type=self.key_type, value_type=str)

    @cached_property
    def right(self) -> Any:
        return self.b.stream(f"{self.p}r", key_type=self.key_type, value_type=str)

    @cached_property
    def versioned(self) -> Any:
        return self.b.table(
            f"{self.p}v",
            key_type=self.key_type,
            value_type=str,
            materialized=Materialized.as_versioned(self.name("versioned"), timedelta(days=1)),
        )

    @cached_property
    def latest(self) -> Any:
        return self.b.table(
            f"{self.p}l",
            key_type=self.key_type,
            value_type=str,
            materialized=Materialized.as_(self.name("latest")),
        )

    @cached_property
    def rows(self) -> Any:
        # a global table, looked up by a selector that returns the awkward key
        return self.b.global_table(
            f"{self.p}g",
            key_type=self.key_type,
            value_type=str,
            materialized=Materialized.as_(self.name("global-store")),
        )

    @cached_property
    def stable(self) -> Any:  # the stream's latest values
        return self.s.to_table(Materialized.as_(self.name("stable")))

    @cached_property
    def rtable(self) -> Any:  # the other stream's latest values
        return self.right.to_table(Materialized.as_(self.name("rtable")))

    @cached_property
    def join_windows(self) -> JoinWindows:
        return JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))


EVERY = timedelta(seconds=10)  # the deduplication interval
WINDOW = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=SIZE))


def _counted(i: Inputs, sink: str, grouped: Any) -> None:
    n = i.name(sink)
    grouped.count(Named.as_(n), Materialized.as_(n)).to_stream().to(n)


def _stream_join(how: str) -> Callable[[Inputs], None]:
    def build(i: Inputs) -> None:
        n = i.name(how)
        joined = StreamJoined.as_(n).with_name(n)
        method = {"inner": i.s.join, "left": i.s.left_join, "outer": i.s.outer_join}[how]
        method(i.right, _join, i.join_windows, joined, value_type=str).to(n)

    return build


def _table_join(sink: str, how: str, fk: bool) -> Callable[[Inputs], None]:
    def build(i: Inputs) -> None:
        n = i.name(sink)
        method = {"inner": i.stable.join, "left": i.stable.left_join}.get(how, i.stable.outer_join)
        if fk:  # the foreign key is the row's own key (the other table's key)
            result = method(
                i.rtable,
                foreign_key_extractor=lambda k, v: k,
                joiner=_join,
                named=Named.as_(n),
                materialized=Materialized.as_(n),
                value_type=str,
            )
        else:
            result = method(
                i.rtable,
                _join,
                named=Named.as_(n),
                materialized=Materialized.as_(n),
                value_type=str,
            )
        result.to_stream().to(n)

    return build


def _processor(
    sink: str,
    store: Any,
    supplier: Callable[[str], Processor[Any, Any, Any, Any]],
    value_type: type[Any],
) -> Callable[[Inputs], None]:
    def build(i: Inputs) -> None:
        n = i.name(sink)
        i.b.add_state_store(store(n, i.key_type))
        i.s.process(lambda: supplier(n), n, key_type=i.key_type, value_type=value_type).to(n)

    return build


def _kv_store(n: str, key_type: Any) -> Any:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(n), key_type=key_type, value_type=int
    )


def _window_store(n: str, key_type: Any) -> Any:
    size = timedelta(milliseconds=SIZE)
    return Stores.window_store_builder(
        Stores.persistent_window_store(n, timedelta(days=1), size, False),
        key_type=key_type,
        value_type=int,
    )


def _versioned_store(n: str, key_type: Any) -> Any:
    return Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store(n, timedelta(days=1)),
        key_type=key_type,
        value_type=str,
    )


#: sink name -> the factory that adds its operator (writing to ``{prefix}-{name}``)
OPERATORS: dict[str, Callable[[Inputs], None]] = {
    "dedup-key": lambda i: i.s.deduplicate_by_key(EVERY, Deduplicated.as_(i.name("dedup-key"))).to(
        i.name("dedup-key")
    ),
    # the same id for each value of a key; None (never a duplicate) for a null value
    "dedup-kv": lambda i: i.s.deduplicate_by_key_value(
        lambda k, v: v and "same", EVERY, Deduplicated.as_(i.name("dedup-kv"))
    ).to(i.name("dedup-kv")),
    "dedup-id": lambda i: i.s.deduplicate(
        lambda k, v: k, EVERY, Deduplicated.as_(i.name("dedup-id"))
    ).to(i.name("dedup-id")),
    "count": lambda i: _counted(i, "count", i.s.group_by_key()),
    "reduce": lambda i: (
        i.s.group_by_key()
        .reduce(
            lambda a, b: f"{a}|{b}", Named.as_(i.name("reduce")), Materialized.as_(i.name("reduce"))
        )
        .to_stream()
        .to(i.name("reduce"))
    ),
    "aggregate": lambda i: (
        i.s.group_by_key()
        .aggregate(
            lambda: 0,
            lambda k, v, n: n + 1,
            Named.as_(i.name("aggregate")),
            Materialized.as_(i.name("aggregate")),
            value_type=int,
        )
        .to_stream()
        .to(i.name("aggregate"))
    ),
    "windowed": lambda i: _counted(i, "windowed", i.s.group_by_key().windowed_by(WINDOW)),
    "final": lambda i: (
        i.s.group_by_key()
        .windowed_by(WINDOW)
        .count(Named.as_(i.name("final")))
        .suppress(Suppressed.until_window_closes().with_name(i.name("final-suppress")))
        .to_stream()
        .to(i.name("final"))
    ),
    "session": lambda i: _counted(
        i,
        "session",
        i.s.group_by_key().windowed_by(
            SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=100))
        ),
    ),
    "sliding": lambda i: _counted(
        i,
        "sliding",
        i.s.group_by_key().windowed_by(
            SlidingWindows.of_time_difference_without_a_grace(timedelta(milliseconds=SIZE))
        ),
    ),
    # the stream and the other stream into one aggregate
    "cogroup": lambda i: (
        i.s.group_by_key()
        .cogroup(lambda k, v, total: total + 1)
        .cogroup(i.right.group_by_key(), lambda k, v, total: total + 100)
        .aggregate(
            lambda: 0,
            Named.as_(i.name("cogroup")),
            Materialized.as_(i.name("cogroup")),
            value_type=int,
        )
        .to_stream()
        .to(i.name("cogroup"))
    ),
    "latest-join": lambda i: i.s.left_join(
        i.latest, _join, Joined.as_(i.name("latest-join")), value_type=str
    ).to(i.name("latest-join")),
    "latest-inner": lambda i: i.s.join(
        i.latest, _join, Joined.as_(i.name("latest-inner")), value_type=str
    ).to(i.name("latest-inner")),
    "versioned-join": lambda i: i.s.join(
        i.versioned, _join, Joined.as_(i.name("versioned-join")), value_type=str
    ).to(i.name("versioned-join")),
    "versioned-left": lambda i: i.s.left_join(
        i.versioned, _join, Joined.as_(i.name("versioned-left")), value_type=str
    ).to(i.name("versioned-left")),
    "inner": _stream_join("inner"),
    "left": _stream_join("left"),
    "outer": _stream_join("outer"),
    "global": lambda i: i.s.join(
        i.rows, lambda k, v: k, _join, i.name("global"), value_type=str
    ).to(i.name("global")),
    "global-left": lambda i: i.s.left_join(
        i.rows, lambda k, v: k, _join, i.name("global-left"), value_type=str
    ).to(i.name("global-left")),
    "tables": _table_join("tables", "outer", fk=False),
    "tables-inner": _table_join("tables-inner", "inner", fk=False),
    "tables-left": _table_join("tables-left", "left", fk=False),
    "fk": _table_join("fk", "inner", fk=True),
    "fk-left": _table_join("fk-left", "left", fk=True),
    # the table re-grouped by its own key: a row per key while it has a value
    "regrouped": lambda i: _counted(
        i,
        "regrouped",
        i.stable.group_by(
            lambda k, v: (k, v),
            Grouped.as_(i.name("regrouped-select")),
            key_type=i.key_type,
            value_type=str,
        ),
    ),
    "suppress": lambda i: (
        i.latest.suppress(
            Suppressed.until_time_limit(
                timedelta(milliseconds=SUPPRESS_MS), BufferConfig.unbounded()
            ).with_name(i.name("suppress"))
        )
        .to_stream()
        .to(i.name("suppress"))
    ),
    "proc": _processor("proc", _kv_store, CountEach, int),
    "proc-window": _processor("proc-window", _window_store, CountEachWindow, int),
    "proc-versioned": _processor("proc-versioned", _versioned_store, PreviousVersion, str),
}


def _expiry(b: StreamsBuilder) -> None:
    """Over topic ``x``: a batch of null keys only, which moves stream time past every
    entry, so the local store expires its last entries without a key of the batch."""
    x = b.stream("x", key_type=str, value_type=str)
    for ms in (0, 1_000):
        x.deduplicate_by_key(timedelta(milliseconds=ms)).to(f"x-dedup-{ms}")
    x.group_by_key().windowed_by(WINDOW).count().to_stream().to("x-windowed")


def topology(sinks: dict[str, list[str]]) -> Any:
    """One app with the operators ``sinks`` names per prefix (``s``: str keys, ``b``:
    bytes keys; ``x``: the expiry story)."""
    b = StreamsBuilder()
    for p in ("s", "b"):
        inputs = Inputs(b, p)
        for name in sinks.get(p, ()):
            OPERATORS[name](inputs)
    if "x" in sinks:
        _expiry(b)
    return b.build()


def pipe(d: TopologyTestDriver, p: str, keys: list[Any], batch: int) -> None:
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


def pipe_expiry(d: TopologyTestDriver, batch: int) -> None:
    if batch <= len(EXPIRY):
        k, v, ts = EXPIRY[batch - 1]
        d.create_input_topic("x").pipe_input(k, v, timestamp=ts)


def expected(p: str, sink: str, keys: list[Any]) -> list[list[Out]]:
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
    elif sink in ("proc", "proc-window"):  # the processor sees every record, null values too
        minus = (None, -1)
        late = 4 if sink == "proc" else 1  # v3 and v4 are each in a window of their own
        batches = [
            each(lambda n, k: [(k, 1)], [minus]),
            each(lambda n, k: [(k, 2), (k, 3)], [minus, minus]),
            each(lambda n, k: [(k, late)], [minus]),
            each(lambda n, k: [(k, late + 1 if sink == "proc" else 1)], [minus]),
        ]
    elif sink == "proc-versioned":  # the value as of just before each record
        null = (None, "null-key")
        batches = [
            each(lambda n, k: [(k, "None")], [null]),
            each(lambda n, k: [(k, f"{n}:v1"), (k, f"{n}:v2")], [null, null]),
            each(lambda n, k: [(k, "None")], [null]),  # the null value at 1.5 s deleted it
            each(lambda n, k: [(k, f"{n}:v3")], [null]),
        ]
    elif sink == "tables":  # each batch's last joined row per key (see last_per_key)
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")]),
            each(lambda n, k: [(k, f"None+{n}:r1")]),  # v2, then a delete of the left row
            each(lambda n, k: [(k, f"{n}:v3+{n}:r1")]),
            each(lambda n, k: [(k, f"{n}:v4+{n}:r1")]),
        ]
    elif sink in ("fk", "fk-left", "tables-inner", "tables-left"):
        # the left row's delete deletes the result (the right row is always there)
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
        # delete waits in the buffer for a later update
        batches = [
            [],
            [],
            [(keys[0], None), *((k, f"{i}:L1") for i, k in enumerate(keys) if i)],
            [],
        ]
    elif sink == "regrouped":  # the count falls to 0 with the delete and stays a row
        batches = [counted(1), counted(0), counted(1), counted(1)]
    elif sink in ("count", "aggregate"):  # a null key or value is dropped
        batches = [counted(c) for c in (1, 2, 3, 4)]
    elif sink == "reduce":
        batches = [
            each(lambda n, k, s=s: [(k, "|".join(f"{n}:v{j}" for j in range(1, s + 1)))])
            for s in (1, 2, 3, 4)
        ]
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
    elif sink in ("latest-join", "latest-inner"):
        # a left join: a null key joins a null table value (KIP-962); the inner join
        # drops it, and joins nothing once the table's row is deleted (at 15 s)
        if sink == "latest-inner":
            batches = [
                each(lambda n, k: [(k, f"{n}:v1+{n}:L1")]),
                each(lambda n, k: [(k, f"{n}:v2+{n}:L1")]),
                [],
                [],
            ]
        else:
            batches = [
                each(lambda n, k: [(k, f"{n}:v1+{n}:L1")], [(None, "n:v1+None")]),
                each(lambda n, k: [(k, f"{n}:v2+{n}:L1")], [(None, "n:v2+None")]),
                each(lambda n, k: [(k, f"{n}:v3+None")], [(None, "n:v3+None")]),
                each(lambda n, k: [(k, f"{n}:v4+None")], [(None, "n:v4+None")]),
            ]
    elif sink in ("versioned-join", "versioned-left"):  # as of each record's time
        batches = [
            each(lambda n, k, s=s: [(k, f"{n}:v{s}+{n}:T{min(s, 3)}")]) for s in (1, 2, 3, 4)
        ]
        if sink == "versioned-left":  # KIP-962: a null key joins a null table value
            batches = [[*b, (None, f"n:v{s}+None")] for s, b in enumerate(batches, start=1)]
    elif sink == "inner":
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:r1")]),
            [],
            [],
        ]
    else:  # left and outer: v3 joins nothing, emitted once its window closes (at FAR)
        assert sink in ("left", "outer"), sink
        right_null = [(None, "None+n:r1")] if sink == "outer" else []
        batches = [
            each(lambda n, k: [(k, f"{n}:v1+{n}:r1")], [(None, "n:v1+None"), *right_null]),
            each(lambda n, k: [(k, f"{n}:v2+{n}:r1")], [(None, "n:v2+None")]),
            [(None, "n:v3+None")],
            each(lambda n, k: [(k, f"{n}:v3+None")], [(None, "n:v4+None")]),
        ]
    return batches


#: Records dropped for a null key, per operator (by its sink's name), over the four
#: batches. The null key's story: on the stream, v1, v2, a null value, v3 and v4 (the
#: negative timestamp is dropped at the source); r1 on the other stream; T1, T2 and T3 on
#: the versioned table; L1 and a delete on the latest table; G1 and a delete on the
#: global table. A stream-table or stream-stream join checks the value first: the null
#: key's null value is dropped as a null value. A table's null keys (the stream's, made a
#: table) are counted where the table is used.
NULL_KEY_DROPS: dict[str, int] = {
    "count": 5,
    "reduce": 5,
    "aggregate": 5,
    "windowed": 5,
    "final": 5,
    "session": 5,
    "sliding": 5,
    "cogroup": 6,  # both streams'
    "latest-join": 2,  # only the table's: the stream's join a null row (KIP-962)
    "latest-inner": 2 + 4,
    "versioned-join": 3 + 4,
    "versioned-left": 3,
    "inner": 4 + 1,
    "left": 1,  # only the other stream's: the stream's join a null record (KIP-962)
    "global": 2 + 4,  # the table's, and the stream's records that select a null key
    "global-left": 2,  # only the table's: a null selected key joins a null row
    "tables": 5 + 1,
    "tables-inner": 5 + 1,
    "tables-left": 5 + 1,
    "fk": 5 + 1,
    "fk-left": 5 + 1,
    "regrouped": 5,
    "suppress": 2,
}
#: the reasons a record is dropped for its null key (``null-join-key``: a global table
#: join's selected key)
NULL_KEY_REASONS = ("null-key", "null-join-key")


def null_key_drops(reasons: dict[tuple[str, str], int], p: str) -> dict[str, int]:
    """Each operator's null-key drops (of ``Metrics.dropped_by_reason()``), its
    processors found by name: ``{p}-{name}`` or ``{p}-{name}-...`` for the longest
    ``name`` of :data:`OPERATORS`."""
    found = dict.fromkeys(OPERATORS, 0)
    for (proc, why), n in reasons.items():
        owners = [
            name for name in OPERATORS if proc == f"{p}-{name}" or proc.startswith(f"{p}-{name}-")
        ]
        if why in NULL_KEY_REASONS and owners:
            found[max(owners, key=len)] += n
    return found


def last_per_key(records: list[Out]) -> list[Out]:
    last: dict[Any, Any] = {}
    for k, v in records:
        last[k] = v
    return list(last.items())


#: sinks where which side of a batch's updates at one timestamp the join takes first is
#: the task's processing order; the row each key ends the batch with is not
LAST_PER_KEY = ("tables", "tables-inner", "tables-left", "fk", "fk-left", "regrouped", "cogroup")


def _key(k: Any) -> Any:
    """A key as it reads back, made comparable: a window's key by its parts."""
    if isinstance(k, Windowed):
        return ("W", k.key, k.window.start, k.window.end)
    return k


def _short(o: Out) -> str:
    k = o[0].key if isinstance(o[0], Windowed) else o[0]
    return f"({'None' if k is None else f'<{type(k).__name__} of {len(k)}>'}, {o[1]!r})"


def check_sink(got: list[list[Out]], p: str, name: str, keys: list[Any]) -> None:
    """Assert that ``got`` (each batch's output of sink ``{p}-{name}``) is
    :func:`expected`'s, whatever the order across keys within a batch (not Kafka
    Streams' business here)."""
    want = expected(p, name, keys)
    if name in LAST_PER_KEY:
        got = [last_per_key(g) for g in got]
    for batch, (g, e) in enumerate(zip(got, want, strict=True), start=1):
        g_keys = Counter((_key(k), v) for k, v in g)
        e_keys = Counter((_key(k), v) for k, v in e)
        assert g_keys == e_keys, (
            f"batch {batch}: missing {[_short(o) for o in e if (_key(o[0]), o[1]) not in g_keys]}"
            f", unexpected {[_short(o) for o in g if (_key(o[0]), o[1]) not in e_keys]}"
        )
