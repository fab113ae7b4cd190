"""``KTable.suppress(Suppressed.until_time_limit(...))``'s operator driven directly (no
Spark): Kafka Streams' scenarios (KTableSuppressProcessorTest), the buffer-full modes, and
a property test against the reference model over random micro-batch splits and restarts,
the durable state checked against the local store after every batch."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.suppressmodel import Full, Update, size_of, suppress
from support.taskharness import Runner, close_local_stores

from kspark_server import envelope as env
from kspark_server import rescale, taskstate
from kspark_server.operators.suppress import SuppressionBufferFull, SuppressProcessor
from kspark_server.spec import KeyValue, Packed, PrimSpec, SpecError, StateOptions, SuppressSpec

STR = PrimSpec(spark="string")
DAY = 86_400_000


def spec(
    limit: int,
    max_records: int | None = None,
    max_bytes: int | None = None,
    when_full: str = "emit",
) -> SuppressSpec:
    return SuppressSpec(
        processor="KTABLE-SUPPRESS",
        store="suppress-buffer",
        time_limit_ms=limit,
        max_records=max_records,
        max_bytes=max_bytes,
        when_full=when_full,
        input=KeyValue(key=STR, value=STR),
        output=KeyValue(key=STR, value=STR),
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        state=StateOptions(check_log=True),
    )


class Table:
    """One task of a suppression; ``run`` takes one micro-batch of updates."""

    def __init__(self, s: SuppressSpec, tmp: Any, mp: pytest.MonkeyPatch) -> None:
        self.runner = Runner(lambda: SuppressProcessor(s), tmp, mp)
        self.seq = itertools.count()

    def run(self, updates: list[Update]) -> list[tuple[Any, Any, int]]:
        return self.runner.run([(next(self.seq), (0, k, v, ts)) for k, v, ts in updates])

    def restart(self) -> None:
        self.runner.restart()


@pytest.fixture(autouse=True)
def _close() -> Any:
    yield
    close_local_stores()


def test_zero_time_limit_emits_at_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Table(spec(0), tmp_path, monkeypatch)
    assert t.run([("hey", "1", 1_000)]) == [("hey", "1", 1_000)]


def test_buffers_until_stream_time_passes_the_limit(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Table(spec(1), tmp_path, monkeypatch)
    assert t.run([("hey", "1", 0)]) == []
    # a later record of the task moves stream time: "hey" (buffered at 0) goes out at 1
    assert t.run([("tick", None, 1)]) == [("hey", "1", 0)]


def test_tombstones_are_buffered_and_emitted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Table(spec(0, max_records=0), tmp_path, monkeypatch)
    assert t.run([("hey", None, 100)]) == [("hey", None, 100)]


def test_a_key_keeps_its_first_buffer_time_and_its_latest_update(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Table(spec(2), tmp_path, monkeypatch)
    assert t.run([("a", "1", 0), ("a", "2", 1), ("b", "1", 1)]) == []
    # stream time 2: "a" (buffered at 0) goes out with its latest update, at its timestamp
    assert t.run([("c", "1", 2)]) == [("a", "2", 1)]
    assert t.run([("b", "2", 3)]) == [("b", "2", 3)]


def test_emits_early_when_over_record_capacity(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Table(spec(100 * DAY, max_records=1), tmp_path, monkeypatch)
    assert t.run([("hey", None, 100)]) == []
    assert t.run([("dummyKey", None, 101)]) == [("hey", None, 100)]


def test_emits_early_when_over_byte_capacity(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = size_of("hey", "v")
    t = Table(spec(100 * DAY, max_bytes=one + 5), tmp_path, monkeypatch)
    assert t.run([("hey", "v", 100)]) == []
    assert t.run([("dummyKey", "v", 101)]) == [("hey", "v", 100)]


@pytest.mark.parametrize("bound", ["records", "bytes"])
def test_shuts_down_when_full(bound: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kw = {"max_records": 1} if bound == "records" else {"max_bytes": size_of("hey", "v")}
    t = Table(spec(100 * DAY, when_full="shut_down", **kw), tmp_path, monkeypatch)
    assert t.run([("hey", "v", 100)]) == []
    with pytest.raises(SuppressionBufferFull) as err:
        t.run([("dummyKey", "v", 100)])
    text = str(err.value)
    assert "KTABLE-SUPPRESS" in text and "exceeded its capacity" in text
    assert "emit_early_when_full" in text and "'dummyKey'" in text


def test_record_limit_scenario(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's shouldSuppressIntermediateEventsWithRecordLimit, on the counts' changelog of
    # its grouped table (v1 counted 1, then 0, v2 1, v1 1 again, then x 1)
    t = Table(spec((1 << 62), max_records=1), tmp_path, monkeypatch)
    got = t.run([("v1", "1", 0), ("v1", "0", 1), ("v2", "1", 1), ("v1", "1", 2)])
    assert got == [("v1", "0", 1), ("v2", "1", 1)]
    assert t.run([("x", "1", 3)]) == [("v1", "1", 2)]


def test_time_limit_scenario(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's shouldSuppressIntermediateEventsWithTimeLimit, with a limit of 2 ms
    t = Table(spec(2), tmp_path, monkeypatch)
    got = t.run([("v1", "1", 0), ("v1", "0", 1), ("v2", "1", 1), ("v1", "1", 2)])
    assert got == [("v1", "1", 2)]
    assert t.run([("tick", "1", 3)]) == [("v2", "1", 1)]
    # "tick" was first buffered at 3: it waits until stream time 5
    assert t.run([("tick", "0", 4), ("tock", "1", 4)]) == []


def test_restart_keeps_the_buffer(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Table(spec(10), tmp_path, monkeypatch)
    assert t.run([("a", "1", 0), ("b", "1", 5)]) == []
    t.restart()
    assert t.run([("c", "1", 12)]) == [("a", "1", 0)]
    t.restart()
    assert t.run([("c", "2", 30)]) == [("b", "1", 5), ("c", "2", 30)]


def test_rescale_counts_the_bytes_again() -> None:
    st = taskstate.empty(taskstate.SUPPRESS, False)
    assert st["bytes"] == 0
    st["table"]["a"] = [0, "a", "1", 0, None, 0, 40]
    st["hash"]["a"] = 3
    st["bytes"] = 40
    parts = rescale.split(taskstate.SUPPRESS, False, st, 2)
    merged = rescale.merge(taskstate.SUPPRESS, False, list(parts.values()))
    assert merged["bytes"] is None and merged["table"] == st["table"]


def test_durability_scenario(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # SuppressionDurabilityIntegrationTest: three keys fit; a restart between the
    # micro-batches neither loses the buffered keys nor emits any of them twice
    t = Table(spec(1 << 62, max_records=3), tmp_path, monkeypatch)
    assert t.run([("k1", "1", 1), ("k2", "1", 2), ("k3", "1", 3)]) == []
    assert t.run([("k4", "1", 4), ("k5", "1", 5)]) == [("k1", "1", 1), ("k2", "1", 2)]
    t.restart()
    got = t.run([("k6", "1", 6), ("k7", "1", 7), ("k8", "1", 8)])
    assert got == [("k3", "1", 3), ("k4", "1", 4), ("k5", "1", 5)]


def _state_of(t: Table, s: SuppressSpec) -> Any:
    """A task's whole state, read back from its durable base and log."""
    store = t.runner.durable
    return taskstate.materialize(s.kind, False, store.chunks(s.store), store.log(s.store))


def test_a_rescaled_task_counts_its_bytes_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two tasks with room for two keys each become one: the new task counts its bytes
    # from its entries, finds itself over its bound, and at its first record pushes the
    # oldest keys out until it fits
    s = spec(100 * DAY, max_bytes=2 * size_of("a", "1"))
    states = []
    for name, batch in (
        ("t0", [("a", "1", 0), ("b", "1", 2)]),
        ("t1", [("c", "1", 1), ("d", "1", 3)]),
    ):
        old = Table(s, tmp_path / name, monkeypatch)
        assert old.run(batch) == []
        states.append(_state_of(old, s))
        close_local_stores()
    assert [x["bytes"] for x in states] == [2 * size_of("a", "1")] * 2
    parts = [p for x in states for p in rescale.split(s.kind, False, x, 1).values()]
    merged = rescale.merge(s.kind, False, parts)
    assert merged["bytes"] is None and len(merged["table"]) == 4
    new = Table(s, tmp_path / "new", monkeypatch)
    base = taskstate.base_chunks(s.kind, False, merged)
    new.runner.durable.seed(s.store, 0, base)
    assert new.run([("e", "1", 4)]) == [("a", "1", 0), ("c", "1", 1), ("b", "1", 2)]


def test_spec_checks_itself() -> None:
    with pytest.raises(SpecError, match="negative"):
        spec(-1)
    with pytest.raises(SpecError, match="max_records"):
        spec(0, max_records=-1)
    with pytest.raises(SpecError, match="buffer-full"):
        spec(0, when_full="drop")


KEYS = st.sampled_from(["a", "b", "c", "", "d" * 600])
VALUES = st.one_of(st.none(), st.sampled_from(["1", "22", "x" * 50]))
UPDATES = st.lists(st.tuples(KEYS, VALUES, st.integers(0, 40)), min_size=1, max_size=30)


@st.composite
def scenarios(draw: Any) -> tuple[Any, ...]:
    updates = draw(UPDATES)
    limit = draw(st.sampled_from([0, 1, 5, 20, 1 << 40, 1 << 40]))
    max_records = draw(st.one_of(st.none(), st.integers(0, 3), st.integers(0, 3)))
    max_bytes = draw(st.one_of(st.none(), st.none(), st.integers(0, 800)))
    shut_down = draw(st.sampled_from([False, False, True]))
    cuts = sorted(draw(st.sets(st.integers(0, len(updates)), max_size=8)))
    restarts = draw(st.sets(st.integers(0, 6), max_size=3))
    return updates, limit, max_records, max_bytes, shut_down, cuts, restarts


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scenario=scenarios())
def test_matches_the_model_over_any_split(
    scenario: tuple[Any, ...], tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    updates, limit, max_records, max_bytes, shut_down, cuts, restarts = scenario
    mode = "shut_down" if shut_down else "emit"
    try:
        want = suppress(updates, limit, max_records, max_bytes, shut_down)
        failed_at = None
    except Full as f:
        want, failed_at = f.out, f.at
    t = Table(spec(limit, max_records, max_bytes, mode), tmp_path_factory.mktemp("s"), monkeypatch)
    got: list[tuple[Any, Any, int]] = []
    bounds = [0, *cuts, len(updates)]
    try:
        for j, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            if j in restarts:
                t.restart()
            if lo == hi:
                continue  # Spark calls no task without records
            try:
                got += t.run(updates[lo:hi])
            except SuppressionBufferFull:
                assert failed_at is not None and lo <= failed_at < hi
                want = [e for e in want if e.at < lo]
                break
        else:
            assert failed_at is None
    finally:
        close_local_stores()
    assert got == [(e.key, e.value, e.ts) for e in want]
