"""Standby replicas of an app whose several stateful operators run together in one
``applyInPandasWithState``, without Spark: each
operator's stores get their copies, from its own task keys, on the disks that hold the
copies of the other operators' task of the same number, and each operator's task that
moves to such a disk promotes its own copy."""

from __future__ import annotations

import dataclasses
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.taskharness import close_local_stores
from test_standby import Task, batches

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.runtime import standbys
from kspark_server import placement, standby
from kspark_server.operators.grouped import GroupedOperator

# -- placement ---------------------------------------------------------------------------


@given(
    disks=st.sets(st.sampled_from("abcdef"), min_size=1),
    tasks=st.integers(1, 8),
    stores=st.sets(st.sampled_from(["seen", "counts", "joined"]), min_size=1),
    replicas=st.integers(0, 3),
    data=st.data(),
)
def test_every_operators_task_gets_its_copies_with_its_task_number(
    disks: set[str], tasks: int, stores: set[str], replicas: int, data: Any
) -> None:
    """Each store's task has ``replicas`` copies off the disk its task runs on, and the
    stores of one task number keep them on the same disks: the executor Spark gives that
    task opens them all. A store whose own disk is not known (it was lost) keeps a copy on
    its task's disk too, which the task promotes there."""
    where = {t: data.draw(st.sampled_from(sorted(disks))) for t in range(tasks)}
    known = sorted(stores)[0]
    active = {(s, t): d for t, d in where.items() for s in stores if s == known or t % 2}
    placed = standby.place_stores(disks, active, {s: range(tasks) for s in stores}, replicas)
    for t in range(tasks):
        holders = {s: {d for d, units in placed.items() if (s, t) in units} for s in stores}
        off = holders[known]
        assert where[t] not in off
        assert len(off) == min(replicas, len(disks) - 1)
        for s in stores:
            assert holders[s] == (off if (s, t) in active else off | {where[t]})


def test_only_stores_with_committed_tasks_are_placed() -> None:
    placed = standby.place_stores(["a", "b"], {("seen", 0): "a"}, {"seen": [0, 1]}, 1)
    assert {u for units in placed.values() for u in units} == {("seen", 0), ("seen", 1)}
    assert ("seen", 0) in placed["b"]


def test_the_keeper_knows_each_operators_task_keys() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=str)
    s.deduplicate_by_key(timedelta(seconds=5)).group_by_key().count(
        materialized=Materialized.as_("counts")
    ).to_stream().to("out")
    config = StreamsConfig(
        application_id="two",
        data_dir=tempfile.mkdtemp(),
        num_partitions=3,
        num_standby_replicas=1,
    )
    output = StreamsApp(b.build(), config, session=object()).compiled()
    k = standbys.StandbyKeeper(object(), object(), output, 1, "chk")
    assert len(k.specs) == 2 and "counts" in k.specs
    assert sorted(k.keys.values()) == sorted([placement.task_keys(3), placement.task_keys(3, 1)])
    rows = [
        {"ks_task": key, "incarnation": f"{store}-{key}", **dict.fromkeys(FIELDS[1:], 1)}
        for store, keys in k.keys.items()
        for key in keys or ()
    ]
    committed = standby.committed_by_store(rows, k.keys)
    assert {s: sorted(c) for s, c in committed.items()} == {s: [0, 1, 2] for s in k.specs}
    for store, c in committed.items():
        assert all(str(v[0]).startswith(f"{store}-") for v in c.values())


FIELDS = standby._FIELDS


def test_a_task_is_covered_only_when_every_operators_store_has_a_copy() -> None:
    k = standbys.StandbyKeeper.__new__(standbys.StandbyKeeper)
    k.disks, k.active, k.copies = {}, {}, set()
    k.learn(
        [
            {"disk": "a", "store": "seen", "task": 0, "kind": "active", "batches": 2},
            {"disk": "a", "store": "counts", "task": 0, "kind": "active", "batches": 2},
            {"disk": "b", "store": "seen", "task": 0, "kind": "standby", "batches": 2},
        ]
    )
    assert not k.covered() and k.disk_of_task(0) == "a"
    k.learn(
        [
            {"disk": "a", "store": "seen", "task": 0, "kind": "active", "batches": 3},
            {"disk": "a", "store": "counts", "task": 0, "kind": "active", "batches": 3},
            {"disk": "b", "store": "seen", "task": 0, "kind": "standby", "batches": 3},
            {"disk": "b", "store": "counts", "task": 0, "kind": "standby", "batches": 3},
        ]
    )
    assert k.covered()


# -- copies of two operators' stores, and their promotion --------------------------------


class OtherTask(Task):
    """A second operator's task 0: a dedup of its own store (``seen2``), the operator
    grouped second in the app's ``applyInPandasWithState``."""

    def __init__(self, tmp: Path, mp: pytest.MonkeyPatch) -> None:
        super().__init__(tmp, mp)
        self.spec = dataclasses.replace(self.spec, store="seen2", processor="DEDUP2")
        self.fn = GroupedOperator(self.spec, "", "", self.chk)


def keep_both(first: Task, second: Task, name: str) -> list[dict[str, Any]]:
    """One standby job's task on executor ``name`` keeping both operators' copies."""
    first.on(name)
    stores = [(t.spec, {0: tuple(t.state.value)}) for t in (first, second)]
    fn = standby.keep(stores, first.chk, None)
    [report] = list(fn(iter([pd.DataFrame({"id": [0]})])))
    return sorted(report.to_dict("records"), key=lambda r: str(r["store"]))


def test_each_operators_copy_is_kept_and_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = Task(tmp_path / "clean", monkeypatch)
    clean.on("x")
    bs = batches()
    want = [clean.step(b)[0] for b in bs]
    close_local_stores()
    one, two = Task(tmp_path, monkeypatch), OtherTask(tmp_path, monkeypatch)
    try:
        for b in bs[:3]:
            for t in (one, two):
                t.on("a")
                t.step(b)
            rows = keep_both(one, two, "b")
            assert [(r["store"], r["kind"]) for r in rows] == [
                ("seen", "standby"),
                ("seen2", "standby"),
            ]
        # executor a is lost: Spark runs task 0, both operators', where the copies are
        for t in (one, two):
            t.on("b")
            assert t.step(bs[3]) == (want[3], {"local_reused": 0, "local_promoted": 0})
        rows = keep_both(one, two, "b")
        assert [(r["store"], r["kind"]) for r in rows] == [("seen", "active"), ("seen2", "active")]
    finally:
        close_local_stores()


def test_a_disk_keeps_only_the_operators_copies_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = Task(tmp_path, monkeypatch), OtherTask(tmp_path, monkeypatch)
    try:
        for t in (one, two):
            t.on("a")
            t.step(batches()[0])
        keep_both(one, two, "b")
        one.on("b")
        from kspark_server import executor

        disk = executor.disk_of(str(tmp_path / "b"))
        stores = [(t.spec, {0: tuple(t.state.value)}) for t in (one, two)]
        fn = standby.keep(stores, one.chk, {disk: {("seen2", 0)}})
        [report] = list(fn(iter([pd.DataFrame({"id": [0]})])))
        got = sorted(zip(report["store"], report["kind"], strict=True))
        assert got == [("seen", "dropped"), ("seen2", "standby")]
    finally:
        close_local_stores()
