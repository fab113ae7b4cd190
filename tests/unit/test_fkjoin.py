"""The foreign-key table-table join's three operators, driven directly (no Spark) as one
pipeline over several tasks per stage: Kafka Streams' scenarios, and a property test
against the reference model over random micro-batch splits and restarts, with the
durable state checked against the local store after every batch."""

from __future__ import annotations

import itertools
import json
import tempfile
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fkjoinmodel import fk_join_reference
from support.taskharness import TaskState, close_local_stores

from kspark_server import envelope as env
from kspark_server import placement
from kspark_server.operators.base import TaskProcessor
from kspark_server.operators.fk_match import FkMatchProcessor
from kspark_server.operators.fk_resolve import FkResolveProcessor
from kspark_server.operators.fk_subscribe import FkSubscribeProcessor
from kspark_server.spec import (
    FkMatchSpec,
    FkResolveSpec,
    FkSubscribeSpec,
    KeyValue,
    Packed,
    PrimSpec,
    SpecError,
    StateOptions,
)

STR = PrimSpec(spark="string")
BIN = PrimSpec(spark="binary")
#: An update: side (0 left, 1 right), key, value (None: delete), timestamp
Upd = tuple[int, str | None, str | None, int]


def foreign_key(value: str) -> str | None:
    """A left value ``"<fk>/<n>"``: its foreign key (none if empty)."""
    return value.split("/")[0] or None


def joiner(left: str, right: str | None) -> str:
    return f"{left}+{right}"


def specs(
    mode: str, state: StateOptions | None = None
) -> tuple[FkSubscribeSpec, FkMatchSpec, FkResolveSpec]:
    state = state or StateOptions()
    sub = FkSubscribeSpec(
        processor="FK-SUB",
        store="fk-left",
        extractor=foreign_key,
        extractor_with_key=False,
        left=KeyValue(key=STR, value=STR),
        fk=STR,
        output=KeyValue(key=STR, value=BIN),
        output_schema=env.envelope_json("string", "binary"),
        packed=Packed(),
        state=state,
    )
    match = FkMatchSpec(
        processor="FK-MATCH",
        store="fk-right",
        stream=KeyValue(key=STR, value=BIN),
        right=KeyValue(key=STR, value=STR),
        output=KeyValue(key=STR, value=BIN),
        output_schema=env.envelope_json("string", "binary"),
        packed=Packed(),
        state=state,
    )
    resolve = FkResolveSpec(
        processor="FK-JOIN",
        store="joined",
        mode=mode,
        joiner=joiner,
        joiner_with_key=False,
        key=STR,
        left_value=STR,
        right_value=STR,
        left_packed=False,
        right_packed=False,
        input=KeyValue(key=STR, value=BIN),
        output=KeyValue(key=STR, value=STR),
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        state=state,
    )
    return sub, match, resolve


def _hash(key: Any) -> int:
    return zlib.crc32(repr(key).encode()) - (1 << 31)


class _Task:
    """One task of one operator, its durable state in a dict."""

    def __init__(self, make: Any, key: int) -> None:
        self.make, self.key = make, key
        self.durable = TaskState(tempfile.mkdtemp())
        self.sides: dict[str, int] = {}
        self.start()

    def start(self) -> None:
        self.proc: TaskProcessor = self.make()

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        import pandas as pd

        key = (self.key,)
        out: list[dict[str, Any]] = []
        table = self.durable.run(self.proc, key, pd.DataFrame(rows))
        for r in [] if table is None else table.to_pylist():
            if r["ks_side"] is None:
                out.append(r)
                continue
            side = json.loads(r["ks_side"])
            if side["kind"] != "store_entries":
                self.sides[side["kind"]] = self.sides.get(side["kind"], 0) + side["count"]
        out.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
        return out


class Pipeline:
    """The three stages, ``tasks`` tasks each, records routed by their key's hash."""

    def __init__(
        self,
        mode: str,
        tasks: int,
        tmp: Any,
        mp: pytest.MonkeyPatch,
        state: StateOptions | None = None,
    ) -> None:
        self.tmp, self.mp, self.n = tmp, mp, tasks
        self.executors = itertools.count()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp / f"exec-{next(self.executors)}"))
        sub, match, resolve = specs(mode, state)
        keys = placement.task_keys(tasks)
        self.stages = [
            [_Task(lambda: FkSubscribeProcessor(sub), k) for k in keys],
            [_Task(lambda: FkMatchProcessor(match), k) for k in keys],
            [_Task(lambda: FkResolveProcessor(resolve), k) for k in keys],
        ]

    def restart(self) -> None:
        """Every task on a new executor: the local stores rebuild from durable state."""
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"exec-{next(self.executors)}"))
        for stage in self.stages:
            for t in stage:
                t.start()

    def _stage(self, i: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        routed: list[list[dict[str, Any]]] = [[] for _ in range(self.n)]
        for r in rows:
            h = _hash(r["key"])
            routed[h % self.n].append({**r, "ks_hash": h, "ks_task": 0, "ks_side": None})
        return [o for t, part in zip(self.stages[i], routed, strict=True) for o in t.run(part)]

    def run(self, batch: list[tuple[int, Upd]]) -> list[tuple[Any, Any, int]]:
        """A micro-batch of (position, update): the join's output records, per key in
        emission order."""

        lefts = [_row(s, u) for s, u in batch if u[0] == 0]
        subs = self._stage(0, lefts)
        rights = [_row(s, u, value=None, ks_tvalue=u[2], ks_jside=1) for s, u in batch if u[0] == 1]
        responses = self._stage(1, [{**r, "ks_tvalue": None, "ks_jside": 0} for r in subs] + rights)
        return [(r["key"], r["value"], int(r["timestamp"])) for r in self._stage(2, responses)]

    def dropped(self) -> int:
        return sum(t.sides.get("dropped", 0) for stage in self.stages for t in stage)


class Pipelined(Pipeline):
    """The three stages as kspark runs them in an app
    (docs/design/sub-topologies.md): each stage's output crosses an internal topic, which
    the next stage reads in the next micro-batch, in the order it was written (sorted by
    position, the sub-position lost), while the right table's updates reach the second
    stage at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subscriptions: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []

    @staticmethod
    def _crossed(rows: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
        rows = sorted(rows, key=lambda r: (r["ks_seq"], r["ks_sub"]))
        return [{**r, "topic": topic, "ks_sub": 0} for r in rows]

    def run(self, batch: list[tuple[int, Upd]]) -> list[tuple[Any, Any, int]]:
        lefts = [_row(s, u) for s, u in batch if u[0] == 0]
        rights = [_row(s, u, value=None, ks_tvalue=u[2], ks_jside=1) for s, u in batch if u[0] == 1]
        results = self._stage(2, self.responses)
        side0 = [{**r, "ks_tvalue": None, "ks_jside": 0} for r in self.subscriptions]
        self.responses = self._crossed(self._stage(1, side0 + rights), "responses")
        self.subscriptions = self._crossed(self._stage(0, lefts), "subscriptions")
        return [(r["key"], r["value"], int(r["timestamp"])) for r in results]

    def drain(self) -> list[tuple[Any, Any, int]]:
        """The micro-batches without input that empty the internal topics."""
        got: list[tuple[Any, Any, int]] = []
        while self.subscriptions or self.responses:
            got += self.run([])
        return got


def _row(seq: int, u: Upd, **more: Any) -> dict[str, Any]:
    side, key, value, ts = u
    return {
        "key": key,
        "value": value,
        "timestamp": ts,
        "headers": None,
        "topic": "right" if side else "left",
        "partition": 0,
        "offset": seq,
        "ks_seq": seq,
        "ks_sub": 0,
        **more,
    }


def run_all(mode: str, updates: list[Upd], tmp: Any, mp: pytest.MonkeyPatch) -> list[Any]:
    """``updates`` one micro-batch each."""
    p = Pipeline(mode, 2, tmp, mp)
    got = []
    for i, u in enumerate(updates):
        got += p.run([(i, u)])
    close_local_stores()
    return got


def test_a_spec_refuses_an_unknown_mode() -> None:
    with pytest.raises(SpecError, match="unknown foreign-key join mode"):
        FkResolveSpec(**{**specs("left")[2].__dict__, "mode": "outer"})


# -- Kafka Streams' scenarios (KTableKTableForeignKeyJoinScenarioTest and the integration
# test's cases), re-expressed ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "inner",
            [
                # the right value arrives after the left one
                ("o1", "a/1+A1", 2),
                # the right value changes: the subscriber's result changes
                ("o1", "a/1+A2", 3),
                # the foreign key moves to one without a right value: retracted
                ("o1", None, 4),
                # ... and back: joined again
                ("o1", "a/2+A2", 5),
                # the right value is deleted: a tombstone
                ("o1", None, 6),
            ],
        ),
        (
            "left",
            [
                ("o1", "a/1+None", 1),
                ("o1", "a/1+A1", 2),
                ("o1", "a/1+A2", 3),
                ("o1", "b/1+None", 4),
                ("o1", "a/2+A2", 5),
                ("o1", "a/2+None", 6),
                # the left delete: a tombstone
                ("o1", None, 7),
            ],
        ),
    ],
)
def test_which_change_emits_what(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str, expected: list[Any]
) -> None:
    updates: list[Upd] = [
        (0, "o1", "a/1", 1),
        (1, "a", "A1", 2),
        (1, "a", "A2", 3),
        (0, "o1", "b/1", 4),
        (0, "o1", "a/2", 5),
        (1, "a", None, 6),
        (0, "o1", None, 7),
    ]
    assert run_all(mode, updates, tmp_path, monkeypatch) == expected


def test_a_null_foreign_key(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    updates: list[Upd] = [
        (1, "a", "A", 1),
        (0, "o", "a/1", 2),
        (0, "o", "/2", 3),
        (0, "o", None, 4),
    ]
    # inner: the result is retracted; left: joiner(value, None), then the delete
    assert run_all("inner", updates, tmp_path / "i", monkeypatch) == [
        ("o", "a/1+A", 2),
        ("o", None, 3),
    ]
    assert run_all("left", updates, tmp_path / "l", monkeypatch) == [
        ("o", "a/1+A", 2),
        ("o", "/2+None", 3),
        ("o", None, 4),
    ]


def test_a_right_update_reaches_every_subscriber(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Pipeline("inner", 2, tmp_path, monkeypatch)
    p.run([(0, (0, "o1", "c/1", 1)), (1, (0, "o2", "c/2", 2)), (2, (0, "o3", "d/3", 3))])
    got = p.run([(3, (1, "c", "C", 4))])
    close_local_stores()
    assert sorted(got) == [("o1", "c/1+C", 4), ("o2", "c/2+C", 4)]


def test_a_stale_response_is_dropped(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The foreign key of o moves from a to b in the batch where a's right value changes.
    a and b live in different tasks, and a's task takes the right update before o's
    unsubscription (which waits behind o2's later record in its queue): its answer to o's
    old value reaches the result after b's answer to the new one, and must not
    overwrite it."""
    assert _hash("a") % 2 != _hash("b") % 2 and _hash("o") % 2 == _hash("o2") % 2
    p = Pipeline("left", 2, tmp_path, monkeypatch)
    p.run([(0, (1, "a", "A1", 1)), (1, (1, "b", "B1", 1)), (2, (0, "o", "a/1", 1))])
    got = p.run([(3, (0, "o2", "a/2", 10)), (4, (0, "o", "b/3", 5)), (5, (1, "a", "A2", 6))])
    close_local_stores()
    mine = [g for g in got if g[0] == "o"]
    assert mine == [("o", "b/3+B1", 5)]


def test_a_null_key_is_dropped_and_counted(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    p = Pipeline("left", 1, tmp_path, monkeypatch)
    assert p.run([(0, (0, None, "a/1", 1)), (1, (1, None, "A", 2))]) == []
    close_local_stores()
    assert p.dropped() == 2


def test_a_delete_of_an_unknown_left_key_emits_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_all("left", [(0, "o", None, 1), (1, "a", None, 2)], tmp_path, monkeypatch) == []


# -- the property test ---------------------------------------------------------------------

updates = st.lists(
    st.one_of(
        st.tuples(
            st.just(0),
            st.sampled_from(["o1", "o2", "o3"]),
            st.sampled_from(["a", "b", "c", ""]) | st.none(),
            st.integers(0, 30),
        ),
        st.tuples(
            st.just(1),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["A", "B"]) | st.none(),
            st.integers(0, 30),
        ),
    ),
    min_size=1,
    max_size=30,
)


#: the durable base (in small chunks) and log read back and compared with the local store
#: after every batch
CHECKED = StateOptions(base_chunk_bytes=64, check_log=True)


def _numbered_values(data: list[tuple[int, str, str | None, int]]) -> list[Upd]:
    """Left values made unique (``"<fk>/<position>"``), so that a result names the left
    update it answers; right values ``"<value><position>"``."""
    ups: list[Upd] = []
    for i, (side, key, v, ts) in enumerate(data):
        value = None if v is None else (f"{v}/{i}" if side == 0 else f"{v}{i}")
        ups.append((side, key, value, ts))
    return ups


def _split(ups: list[Upd], cuts: list[int]) -> list[list[tuple[int, Upd]]]:
    """``ups`` with their positions, in micro-batches cut before each of ``cuts``."""
    numbered = list(enumerate(ups))
    bounds = [0, *sorted(c for c in cuts if c < len(ups)), len(ups)]
    return [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _agrees_with_the_model(got: list[tuple[Any, Any, int]], ups: list[Upd], mode: str) -> None:
    """The reference model's final table whatever the split, and no key's changelog
    stepping back to an older left value."""
    table: dict[str, str] = {}
    for k, v, _ in got:
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    assert table == fk_join_reference(ups, mode, foreign_key, joiner)
    newest: dict[str, int] = {}
    for k, v, _ in got:
        if v is not None:
            at = int(v.split("+")[0].split("/")[1])
            assert at >= newest.get(k, -1), (k, v, got)
            newest[k] = at


@settings(max_examples=150, deadline=None)
@given(
    data=updates,
    mode=st.sampled_from(["inner", "left"]),
    tasks=st.integers(1, 3),
    cuts=st.lists(st.integers(1, 29), max_size=4, unique=True),
    restarts=st.sets(st.integers(1, 4), max_size=2),
)
def test_property_against_the_reference_model(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[int, str, str | None, int]],
    mode: str,
    tasks: int,
    cuts: list[int],
    restarts: set[int],
) -> None:
    ups = _numbered_values(data)
    with pytest.MonkeyPatch.context() as mp:
        p = Pipeline(mode, tasks, tmp_path_factory.mktemp("fk"), mp, CHECKED)
        got = []
        for i, batch in enumerate(_split(ups, cuts)):
            if i in restarts:
                p.restart()
            got += p.run(batch)
        close_local_stores()
    _agrees_with_the_model(got, ups, mode)


@settings(max_examples=100, deadline=None)
@given(
    data=updates,
    mode=st.sampled_from(["inner", "left"]),
    tasks=st.integers(1, 3),
    cuts=st.lists(st.integers(1, 29), max_size=6, unique=True),
    restarts=st.sets(st.integers(1, 6), max_size=2),
    drains=st.sets(st.integers(1, 6), max_size=3),
)
def test_property_with_the_stages_a_micro_batch_apart(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[int, str, str | None, int]],
    mode: str,
    tasks: int,
    cuts: list[int],
    restarts: set[int],
    drains: set[int],
) -> None:
    """Each stage reads the last one's messages a
    micro-batch later, the right table's updates at once: a change of foreign key, a
    delete on either side (and a key deleted and back before its messages arrive) and a
    null foreign key end in the reference model's table for any split, with the
    internal topics drained between some micro-batches and not others."""
    ups = _numbered_values(data)
    with pytest.MonkeyPatch.context() as mp:
        p = Pipelined(mode, tasks, tmp_path_factory.mktemp("fkp"), mp, CHECKED)
        got = []
        for i, batch in enumerate(_split(ups, cuts)):
            if i in restarts:
                p.restart()
            got += p.run(batch)
            if i in drains:
                got += p.drain()
        got += p.drain()
        close_local_stores()
    _agrees_with_the_model(got, ups, mode)


def test_a_key_deleted_and_back_while_its_messages_travel(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The left key's versions start again after its delete: its new value's answers
    come a micro-batch after the delete's, never mixed with them."""
    p = Pipelined("left", 2, tmp_path, monkeypatch)
    got = p.run([(0, (1, "a", "A", 1)), (1, (1, "b", "B", 1)), (2, (0, "o", "a/2", 2))])
    got += p.run([(3, (0, "o", None, 3))])
    got += p.run([(4, (0, "o", "b/4", 4)), (5, (1, "a", "A5", 5))])
    got += p.drain()
    close_local_stores()
    assert got == [("o", "a/2+A", 2), ("o", None, 3), ("o", "b/4+B", 4)]


# -- the DSL and the compiler (plan only) ---------------------------------------------------


def test_the_dsl_forms_and_the_compiled_stages() -> None:
    from kspark import Materialized, StreamsBuilder
    from kspark.bindings import bind_topology
    from kspark.compiler import stages as stg
    from kspark.compiler.compiler import compile_topology
    from kspark.config import StreamsConfig
    from kspark.plan import nodes as n

    b = StreamsBuilder()
    orders = b.table("orders", key_type=str, value_type=str)
    customers = b.table("customers", key_type=int, value_type=str)
    inner = orders.join(customers, lambda o: len(o), joiner, value_type=str)
    left = orders.left_join(
        customers,
        foreign_key_extractor=lambda k, o: len(k),
        joiner=joiner,
        materialized=Materialized.as_("enriched"),
        value_type=str,
    )
    assert isinstance(inner.node, n.ForeignKeyJoin) and inner.node.mode == "inner"
    assert isinstance(left.node, n.ForeignKeyJoin) and left.node.extractor_with_key
    assert left.store_name == "enriched"
    assert left.node.stores() == (
        "enriched",
        "enriched-fk-subscriptions",
        "enriched-fk-registrations",
    )
    left.to_stream().to("out")
    cfg = StreamsConfig(application_id="a", data_dir="/tmp/fk-plan")
    (part,) = compile_topology(bind_topology(b.build(), cfg), cfg).sinks
    resolve = part.stage
    while not isinstance(resolve, stg.Stateful):
        resolve = resolve.inputs[0]
    match = resolve.stream
    assert isinstance(match, stg.Stateful) and isinstance(match.stream, stg.Stateful)
    assert [s.spec.kind for s in (match.stream, match, resolve)] == [
        "fksubscribe",
        "fkmatch",
        "fkresolve",
    ]
    # the subscriptions are keyed by the foreign key: the right table's key type
    assert match.stream.key_type == match.table.key_type  # type: ignore[union-attr]


def test_the_dsl_refuses_what_it_cannot_join() -> None:
    from kspark import StreamsBuilder
    from kspark.errors import InvalidArgumentError

    b = StreamsBuilder()
    orders = b.table("orders", key_type=str, value_type=str)
    customers = b.table("customers", key_type=str, value_type=str)
    with pytest.raises(InvalidArgumentError, match="joiner is required"):
        orders.join(customers, foreign_key_extractor=foreign_key)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="foreign_key_extractor must be callable"):
        orders.join(customers, foreign_key_extractor=3, joiner=joiner)  # type: ignore[call-overload]


def _steps(mode: str, steps: list[list[Upd]], tmp: Any, mp: pytest.MonkeyPatch) -> list[Any]:
    """Each step's output as a map (its last record per key), as Kafka's tests read them;
    the same with the stages a micro-batch apart, their topics drained after each step."""
    runs = []
    for apart in (False, True):
        p = Pipelined(mode, 2, tmp / str(apart), mp) if apart else Pipeline(mode, 2, tmp, mp)
        seq = itertools.count()
        got = []
        for step in steps:
            out = p.run([(next(seq), u) for u in step])
            if isinstance(p, Pipelined):
                out += p.drain()
            got.append(dict((k, v) for k, v, _ in out))
        close_local_stores()
        runs.append(got)
    assert runs[0] == runs[1]
    return runs[0]


@pytest.mark.parametrize("mode", ["inner", "left"])
def test_kafka_join_from_right_then_delete_right(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    left = mode == "left"
    steps: list[list[Upd]] = [
        [(0, "l1", "r1/1", 1), (0, "l2", "r2/2", 1), (0, "l3", "r1/3", 1)],
        [(1, "r1", "R1", 2)],
        [(1, "r2", "R2", 3)],
        [(1, "r3", "R3", 4)],  # no subscriber: nothing
        [(1, "r1", None, 5)],
    ]
    assert _steps(mode, steps, tmp_path, monkeypatch) == [
        {"l1": "r1/1+None", "l2": "r2/2+None", "l3": "r1/3+None"} if left else {},
        {"l1": "r1/1+R1", "l3": "r1/3+R1"},
        {"l2": "r2/2+R2"},
        {},
        {"l1": "r1/1+None" if left else None, "l3": "r1/3+None" if left else None},
    ]


@pytest.mark.parametrize("mode", ["inner", "left"])
def test_kafka_join_from_left_then_delete_left(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    steps: list[list[Upd]] = [
        [(1, "r1", "R1", 1), (1, "r2", "R2", 1), (1, "r3", "R3", 1)],
        [(0, "l1", "r1/1", 2), (0, "l2", "r2/2", 2)],
        [(0, "l3", "r1/3", 3)],  # another subscriber of r1
        [(0, "l1", None, 4)],
        [(0, "l1", None, 5)],  # deleting what is gone: nothing
    ]
    assert _steps(mode, steps, tmp_path, monkeypatch) == [
        {},
        {"l1": "r1/1+R1", "l2": "r2/2+R2"},
        {"l3": "r1/3+R1"},
        {"l1": None},
        {},
    ]


@pytest.mark.parametrize("mode", ["inner", "left"])
def test_kafka_moves_between_missing_foreign_keys(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Kafka Streams' inner join emits a tombstone when a value moves between foreign keys
    without a right value, and when a value that joined nothing is deleted (it cannot know
    whether a result exists); kspark's last stage knows, and emits nothing."""
    left = mode == "left"
    steps: list[list[Upd]] = [
        [(0, "l1", "r1/1", 1)],
        [(0, "l1", "r2/2", 2)],
        [(1, "r1", "R1", 3)],  # r1 has no subscriber now
        [(0, "l1", "r1/4", 4)],
        [(0, "l1", None, 5)],
    ]
    assert _steps(mode, steps, tmp_path, monkeypatch) == [
        {"l1": "r1/1+None"} if left else {},
        {"l1": "r2/2+None"} if left else {},
        {},
        {"l1": "r1/4+R1"},
        {"l1": None},
    ]


@pytest.mark.parametrize("mode", ["inner", "left"])
def test_kafka_unsubscribes_the_old_foreign_key(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    steps: list[list[Upd]] = [
        [(1, "r1", "R1", 1), (1, "r2", "R2", 1)],
        [(0, "l1", "r1/1", 2)],
        [(0, "l1", "r2/2", 3)],
        [(1, "r1", "R1b", 4)],  # the old foreign key's change reaches nobody
    ]
    assert _steps(mode, steps, tmp_path, monkeypatch) == [
        {},
        {"l1": "r1/1+R1"},
        {"l1": "r2/2+R2"},
        {},
    ]


def test_the_result_joins_again() -> None:
    """As Kafka's rejoin case: the foreign-key join's result is a table that a same-key
    join takes."""
    from kspark import StreamsBuilder
    from kspark.bindings import bind_topology
    from kspark.compiler.compiler import compile_topology
    from kspark.config import StreamsConfig

    b = StreamsBuilder()
    orders = b.table("orders", key_type=str, value_type=str)
    customers = b.table("customers", key_type=str, value_type=str)
    fk = orders.join(customers, foreign_key, joiner, value_type=str)
    fk.left_join(orders, lambda j, o: f"rejoin({j},{o})", value_type=str).to_stream().to("out")
    cfg = StreamsConfig(application_id="a", data_dir="/tmp/fk-plan")
    assert compile_topology(bind_topology(b.build(), cfg), cfg).sinks
