"""``KTable.suppress(Suppressed.until_time_limit(...))`` through the test driver's
in-process engine: the DSL and its checks, the plan, Kafka Streams' scenarios
(SuppressScenarioTest) on a source table, a corpus of awkward keys and timestamps, and a
full buffer that stops the app."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kspark import BufferConfig, StreamsBuilder, StreamsConfig, Suppressed, TimeWindows, Topic
from kspark.compiler.compiler import compile_topology
from kspark.errors import InvalidArgumentError, SuppressionBufferFullError
from kspark.plan.suppression import SuppressTimeLimit
from kspark.testing import TopologyTestDriver
from kspark_server.spec import SuppressSpec

MS = timedelta(milliseconds=1)


def _config(partitions: int = 1) -> StreamsConfig:
    return StreamsConfig(application_id="suppress", num_partitions=partitions)


def _topology(
    suppressed: Suppressed, key_type: Any = str, value_type: Any = int, bound: bool = False
) -> Any:
    b = StreamsBuilder()
    src: Any = Topic.jsonl("input", "/unused") if bound else "input"
    table = b.table(src, key_type=key_type, value_type=value_type)
    table.suppress(suppressed).to_stream().to(Topic.jsonl("out", "/unused") if bound else "out")
    return b.build()


def _read(out: Any) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in out.read_records()]


def test_buffer_config_chains() -> None:
    b = BufferConfig.max_records(3).with_max_bytes(100)
    assert (b.max_records_, b.max_bytes_, b.when_full) == (3, 100, "emit")
    assert b.should_shut_down_when_full().when_full == "shut_down"
    assert b.should_shut_down_when_full().emit_early_when_full().when_full == "emit"
    assert not BufferConfig.unbounded().bounded
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgumentError):
            BufferConfig.max_records(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        Suppressed.until_time_limit(timedelta(seconds=-1), BufferConfig.unbounded())
    with pytest.raises(InvalidArgumentError):
        Suppressed.until_time_limit(MS, "unbounded")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="until_time_limit"):
        Suppressed.until_window_closes(BufferConfig.max_records(3))


def test_plan_and_spec() -> None:
    s = Suppressed.until_time_limit(
        timedelta(seconds=10), BufferConfig.max_bytes(1 << 20).should_shut_down_when_full()
    ).with_name("calm")
    topo = _topology(s, bound=True)
    node = next(x for x in topo.nodes() if isinstance(x, SuppressTimeLimit))
    assert (node.name, node.store_name, node.time_limit_ms) == ("calm", "calm-store", 10_000)
    assert "calm (stores: [calm-store])" in topo.describe()
    specs = [
        stage.spec
        for stage in compile_topology(topo, _config()).stages()
        if isinstance(getattr(stage, "spec", None), SuppressSpec)
    ]
    assert [(x.max_records, x.max_bytes, x.when_full) for x in specs] == [
        (None, 1 << 20, "shut_down")
    ]


def test_windowed_table_with_a_time_limit() -> None:
    b = StreamsBuilder()
    w = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10))
    counts = b.stream("input", key_type=str, value_type=int).group_by_key().windowed_by(w).count()
    counts.suppress(Suppressed.until_time_limit(5 * MS, BufferConfig.unbounded())).to_stream().to(
        "out"
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        src.pipe_input("a", 1, timestamp=0)
        assert _read(out) == []
        src.pipe_input("a", 1, timestamp=3)
        assert _read(out) == []
        src.pipe_input("b", 1, timestamp=5)  # the window [0, 10) of "a", first buffered at 0
        assert [(k.key, k.window.start, v, t) for k, v, t in _read(out)] == [("a", 0, 2, 3)]


def test_time_limit_scenario() -> None:
    # SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit, on the changelog
    # its grouped count emits, one micro-batch per record as Kafka Streams takes them
    topo = _topology(Suppressed.until_time_limit(2 * MS, BufferConfig.unbounded()))
    with TopologyTestDriver(topo, _config(), engine="local") as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        got = []
        for k, v, t in [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]:
            src.pipe_input(k, v, timestamp=t)
            got += _read(out)
        assert got == [("v1", 1, 2)]
        src.pipe_input("tick", 1, timestamp=3)
        assert _read(out) == [("v2", 1, 1)]
        src.pipe_input("tick", 0, timestamp=4)
        src.pipe_input("tock", 1, timestamp=4)
        assert _read(out) == []  # "tick" waits from 3 until stream time 5


def test_zero_time_limit_scenario() -> None:
    # shouldImmediatelyEmitEventsWithZeroEmitAfter: every update goes through
    topo = _topology(Suppressed.until_time_limit(timedelta(0), BufferConfig.unbounded()))
    updates = [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2), ("x", 1, 3)]
    with TopologyTestDriver(topo, _config(), engine="local") as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        for k, v, t in updates:
            src.pipe_input(k, v, timestamp=t)
        assert _read(out) == updates


@pytest.mark.parametrize(
    "config", [BufferConfig.max_records(1), BufferConfig.max_bytes(40)], ids=["records", "bytes"]
)
def test_capacity_scenario(config: BufferConfig) -> None:
    # shouldSuppressIntermediateEventsWithRecordLimit / ...WithBytesLimit: updates of one
    # key collapse into its latest; a second key pushes the first out (an update of
    # these is 28 bytes: 24, a 3-byte key, a 1-byte value)
    topo = _topology(Suppressed.until_time_limit(timedelta(days=10_000), config))
    with TopologyTestDriver(topo, _config(), engine="local") as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        got = []
        for k, v, t in [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]:
            src.pipe_input(k, v, timestamp=t)
            got += _read(out)
        assert got == [("v1", 0, 1), ("v2", 1, 1)]
        src.pipe_input("x", 1, timestamp=3)
        assert _read(out) == [("v1", 1, 2)]


def test_full_buffer_stops_the_app() -> None:
    config = BufferConfig.max_records(1).should_shut_down_when_full()
    topo = _topology(Suppressed.until_time_limit(timedelta(days=1), config).with_name("calm"))
    with TopologyTestDriver(topo, _config(), engine="local") as d:
        src = d.create_input_topic("input")
        src.pipe_input("a", 1, timestamp=0)
        d.create_output_topic("out").read_records()
        src.pipe_input("b", 1, timestamp=1)
        with pytest.raises(SuppressionBufferFullError) as err:
            d.create_output_topic("out").read_records()
    assert err.value.code == "KSPARK_SUPPRESSION_BUFFER_FULL"
    assert "calm" in str(err.value) and "emit_early_when_full" in str(err.value)


BIG = b"k" * (1 << 20)
CORPUS: list[tuple[bytes, bytes | None, int]] = [
    (b"", b"empty key", 0),
    (BIG, b"a 1 MiB key", 1),
    (b"\xff\xfe\x00", b"\xc3\x28", 2),  # not UTF-8
    (b"", None, 3),  # tombstones
    (b"\xff\xfe\x00", None, 4),
    (BIG, b"v" * (1 << 20), 5),
    (b"late", b"x", 0),
    (b"max", b"y", (1 << 63) - 1),
]


@pytest.mark.parametrize("partitions", [1, 3])
def test_key_corpus(partitions: int) -> None:
    limit = Suppressed.until_time_limit(timedelta(0), BufferConfig.unbounded())
    with TopologyTestDriver(
        _topology(limit, bytes, bytes), _config(partitions), engine="local"
    ) as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        for k, v, t in CORPUS:
            src.pipe_input(k, v, timestamp=t)
        got = _read(out)
    # a time limit of zero: every update goes out, in its task's order
    assert sorted(got, key=repr) == sorted(CORPUS, key=repr)
    for key in {k for k, _, _ in CORPUS}:
        assert [r for r in got if r[0] == key] == [r for r in CORPUS if r[0] == key]


def test_key_corpus_waits_for_stream_time() -> None:
    limit = Suppressed.until_time_limit(timedelta(days=1), BufferConfig.unbounded())
    with TopologyTestDriver(_topology(limit, bytes, bytes), _config(), engine="local") as d:
        src, out = d.create_input_topic("input"), d.create_output_topic("out")
        for k, v, t in CORPUS[:-1]:
            src.pipe_input(k, v, timestamp=t)
        assert _read(out) == []
        src.pipe_input(b"max", b"y", timestamp=(1 << 63) - 1)
        got = _read(out)
    # each key's latest update, oldest buffer time first; the last one still waits
    assert got == [(b"", None, 3), (b"late", b"x", 0), (BIG, CORPUS[5][1], 5), CORPUS[4]]
