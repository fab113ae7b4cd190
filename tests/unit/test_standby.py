"""Standby replicas (``num_standby_replicas``), without Spark: where copies go, how a
worker names its executor, the copies a standby job keeps from the committed files, and
their promotion by a dedup task that moves to their
executor (output as a clean run's, reported as promoted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.keycorpus import corpus_keys
from support.taskharness import Out, Rec, close_local_stores
from test_grouped_runner_files import GroupState, declared, pa_table, spec

from kspark import StreamsConfig
from kspark.errors import ConfigError
from kspark.runtime import restore, standbys
from kspark_server import executor, localstore, placement, standby
from kspark_server.operators.grouped import GroupedOperator, frame_table

# -- placement ---------------------------------------------------------------------------


@given(
    disks=st.sets(st.sampled_from("abcdef"), min_size=1),
    tasks=st.integers(1, 12),
    replicas=st.integers(0, 4),
    data=st.data(),
)
def test_each_task_gets_its_copies_off_its_own_disk(
    disks: set[str], tasks: int, replicas: int, data: Any
) -> None:
    active = {t: data.draw(st.sampled_from(sorted(disks))) for t in range(tasks)}
    placed = standby.place(disks, active, range(tasks), replicas)
    for t in range(tasks):
        holders = {d for d, ts in placed.items() if t in ts}
        assert active[t] not in holders
        assert len(holders) == min(replicas, len(disks) - 1)


@given(disks=st.sets(st.sampled_from("abcdef"), min_size=2), new=st.sampled_from("xyz"))
def test_a_new_disk_moves_only_the_copies_it_takes(disks: set[str], new: str) -> None:
    active = {t: sorted(disks)[t % len(disks)] for t in range(10)}
    before = standby.place(disks, active, range(10), 1)
    after = standby.place(disks | {new}, active, range(10), 1)
    for d in disks:
        assert after.get(d, set()) <= before.get(d, set())


def test_a_lost_disk_is_forgotten_after_some_rounds() -> None:
    k = standbys.StandbyKeeper.__new__(standbys.StandbyKeeper)
    k.disks, k.active, k.copies = {}, {}, set()
    k.learn([{"disk": "a", "store": "s", "task": 0, "kind": "active", "batches": 1}])
    k.learn([{"disk": "b", "store": "s", "task": 0, "kind": "standby", "batches": 1}])
    assert k.active == {("s", 0): "a"} and k.covered()
    for _ in range(standbys.FORGET_AFTER):
        k.learn([{"disk": "b", "store": "s", "task": 0, "kind": "active", "batches": 2}])
    assert set(k.disks) == {"b"} and k.active == {("s", 0): "b"} and not k.covered()


# -- executors and their roots -----------------------------------------------------------


def test_a_worker_names_its_executor() -> None:
    url = "http://127.0.0.1:1/logPage/?appId=app-1&executorId=7&logType=stderr"
    assert executor.executor_id({"SPARK_EXECUTOR_ID": "9", "SPARK_LOG_URL_STDERR": url}) == "9"
    assert executor.executor_id({"SPARK_LOG_URL_STDERR": url}, "/") == "7"
    assert executor.executor_id({}, "/s/work/app-20261127231930-0000/1/378002c2") == "1"
    assert executor.executor_id({}, "/tmp/app-x/1") == "driver"


def test_the_executor_placeholder_gives_each_executor_its_root(tmp_path: Path) -> None:
    root = str(tmp_path / "{executor}")
    a = localstore.task_path(root, "seen", "inc", 0)
    assert "executor-driver" in a and "{executor}" not in a
    assert executor.expand_root(root, "3") == str(tmp_path / "executor-3")


# -- config ------------------------------------------------------------------------------


def test_num_standby_replicas_is_checked() -> None:
    assert StreamsConfig(application_id="a").num_standby_replicas == 0
    cfg = StreamsConfig(application_id="a", num_standby_replicas=2)
    assert cfg.num_standby_replicas == 2
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ConfigError, match="num_standby_replicas must be an int"):
            StreamsConfig(application_id="a", num_standby_replicas=bad)


# -- copies and their promotion ----------------------------------------------------------


class Task:
    """A dedup task whose executor can change; its
    side rows are kept."""

    def __init__(self, tmp: Path, mp: pytest.MonkeyPatch, key: str = "string") -> None:
        self.spec = spec(100, key=key)
        self.declared = declared(key)
        self.chk = str(tmp / "chk")
        self.fn = GroupedOperator(self.spec, "", "", self.chk)
        self.tmp, self.mp = tmp, mp
        self.state = GroupState()

    def on(self, name: str) -> None:
        """Run on executor ``name`` (its own disk)."""
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / name))

    def step(self, batch: list[tuple[int, Rec]]) -> tuple[list[Out], dict[str, int]]:
        state = GroupState(self.state.value)
        rows: list[dict[str, Any]] = []
        for f in self.fn((placement.task_keys(1)[0],), iter([pa_table(batch)]), state):
            rows.extend(frame_table([f], self.declared).to_pylist())
        self.state = state
        sides = [json.loads(r["ks_side"]) for r in rows if r["ks_side"]]
        out = sorted(
            ((r["ks_seq"], r["ks_sub"]), (r["key"], r["value"], int(r["timestamp"])))
            for r in rows
            if not r["ks_side"]
        )
        local = {s["kind"]: int(s["count"]) for s in sides if s["kind"].startswith("local_")}
        return [o for _, o in out], local

    def keep_copy(self, name: str) -> list[dict[str, Any]]:
        """A standby job's task on executor ``name``, at the committed version."""
        self.on(name)
        committed = {0: tuple(self.state.value)}
        fn = standby.keep([(self.spec, committed)], self.chk, None)
        [report] = list(fn(iter([pd.DataFrame({"id": [0]})])))
        return list(report.to_dict("records"))


def batches() -> list[list[tuple[int, Rec]]]:
    # a large first batch, then small ones: their changes are logged, not new bases
    first = [(j, (0, f"k{j}", "v", j)) for j in range(40)]
    return [first] + [
        [(100 * i + j, (0, f"k{40 + 2 * i + j % 2}", f"v{i}{j}", 50 + i)) for j in range(3)]
        for i in range(1, 5)
    ]


@pytest.fixture
def want(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[Out]]:
    clean = Task(tmp_path / "clean", monkeypatch)
    clean.on("x")
    out = [clean.step(b)[0] for b in batches()]
    close_local_stores()
    return out


def test_a_copy_at_the_committed_version_is_promoted_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, want: list[list[Out]]
) -> None:
    t = Task(tmp_path, monkeypatch)
    bs = batches()
    try:
        t.on("a")
        for b, w in zip(bs[:3], want, strict=False):
            assert t.step(b)[0] == w
        [row] = t.keep_copy("b")
        assert row["kind"] == "standby" and row["entries"] > 0
        [row] = t.keep_copy("b")
        assert (row["kind"], row["entries"]) == ("standby", 0), "already at the version"
        t.on("b")  # executor a is lost: Spark runs the task where the copy is
        assert t.step(bs[3]) == (want[3], {"local_reused": 0, "local_promoted": 0})
        # the copy is the task's own now: the standby job leaves it alone
        [row] = t.keep_copy("b")
        assert row["kind"] == "active"
        t.on("b")
        assert t.step(bs[4]) == (want[4], {"local_reused": 0})
    finally:
        close_local_stores()


def test_a_copy_behind_catches_up_when_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, want: list[list[Out]]
) -> None:
    t = Task(tmp_path, monkeypatch)
    bs = batches()
    try:
        t.on("a")
        t.step(bs[0])
        t.step(bs[1])
        t.keep_copy("b")
        t.on("a")
        assert t.step(bs[2])[0] == want[2]  # the copy misses this batch
        t.on("b")
        out, local = t.step(bs[3])
        assert out == want[3]
        assert set(local) == {"local_caught_up", "local_promoted"}
        assert local["local_caught_up"] == local["local_promoted"] > 0
    finally:
        close_local_stores()


def test_a_copy_behind_is_caught_up_by_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, want: list[list[Out]]
) -> None:
    t = Task(tmp_path, monkeypatch)
    bs = batches()
    try:
        t.on("a")
        t.step(bs[0])
        t.keep_copy("b")
        for b in bs[1:3]:
            t.on("a")
            t.step(b)
            [row] = t.keep_copy("b")
            assert row["kind"] == "standby" and 0 < row["entries"] <= 2
        t.on("b")
        assert t.step(bs[3]) == (want[3], {"local_reused": 0, "local_promoted": 0})
    finally:
        close_local_stores()


def test_a_store_in_use_is_never_written_by_a_standby_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Task(tmp_path, monkeypatch)
    bs = batches()
    try:
        t.on("a")
        t.step(bs[0])
        before = t.state.value
        t.step(bs[1])  # an attempt that does not commit: a's store is ahead
        t.state = GroupState(before)
        [row] = t.keep_copy("a")
        assert row["kind"] == "active"
        s = localstore.TaskStore.open(
            str(tmp_path / "a"), "seen", str(before[0]), 0, application_id=""
        )
        assert s.version == (str(before[0]), 2) and not standby.is_standby(s)
    finally:
        close_local_stores()


def test_a_copy_no_longer_placed_on_a_disk_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Task(tmp_path, monkeypatch)
    try:
        t.on("a")
        t.step(batches()[0])
        t.keep_copy("b")
        t.on("b")
        disk = executor.disk_of(str(tmp_path / "b"))
        fn = standby.keep([(t.spec, {0: tuple(t.state.value)})], t.chk, {disk: set()})
        [report] = list(fn(iter([pd.DataFrame({"id": [0]})])))
        assert report["kind"].tolist() == ["dropped"]
        assert not list((tmp_path / "b").rglob("data.mdb"))
    finally:
        close_local_stores()


# -- reporting ---------------------------------------------------------------------------


def test_promotions_reach_the_restore_listener_once_per_batch() -> None:
    got: list[tuple[str, restore.StandbyPromotion]] = []

    class Listener(restore.StateRestoreListener):
        def on_standby_promoted(self, store: str, promotion: restore.StandbyPromotion) -> None:
            got.append((store, promotion))

    class Query:
        runId = "r"

    tracker = restore.RestoreTracker()
    from kspark.compiler import stages as stg
    from kspark_server.spec import SinksSpec

    tracker.begin(
        Query(), stg.Output(sinks=(), writer_spec=SinksSpec(), stores={}), "c", restoring=False
    )

    def side(kind: str, task: str, n: int) -> dict[str, Any]:
        return {"kind": kind, "processor": "seen", "task": task, "count": n}

    progress = {
        ("r", 1): {"batchId": 1, "observedMetrics": {"kspark": {"side": []}}},
        ("r", 2): {
            "batchId": 2,
            "observedMetrics": {
                "kspark": {
                    "side": [
                        side("local_promoted", "0_1", 3),
                        side("local_promoted", "0_3", 0),
                        side("local_caught_up", "0_1", 3),
                    ]
                }
            },
        },
    }
    listener = Listener()
    tracker.observe(progress, listener)
    tracker.observe(progress, listener)
    assert got == [
        ("seen", restore.StandbyPromotion(store="seen", batch_id=2, tasks=2, entries_caught_up=3))
    ]
    assert tracker.promotions() == [got[0][1]]


# -- awkward keys ------------------------------------------------------------------------


def awkward_batches(key: str) -> list[list[tuple[int, Rec]]]:
    """Five batches of awkward keys and null keys (deduplication forwards those and
    stores nothing). The first holds every key but the last 1 MiB key, whose twin (its
    last byte differs) comes in the second; the third moves stream time past the
    interval, so the keys it leaves out expire (their entries are removed); the fourth
    brings back some of the short ones (a small change, logged), and the fifth repeats
    every key."""
    keys = corpus_keys(key)
    half, back = keys[::2], [k for k in keys[1::2] if len(k) < 1000]
    stamps = [(1, 0, keys[:-1]), (2, 50, keys), (3, 200, half), (4, 205, back), (5, 210, keys)]
    out = []
    for n, ts, ks in stamps:
        recs: list[Rec] = [(0, k, f"v{n}-{i}", ts + i % 3) for i, k in enumerate(ks)]
        recs += [(0, None, f"null{n}-{i}", ts) for i in range(2)]
        out.append([(100 * n + i, r) for i, r in enumerate(recs)])
    return out


def local_pairs(root: Path, state: Any) -> list[tuple[bytes, bytes]]:
    """The (key, entry) pairs of task 0's local store under ``root``, at ``state``'s
    incarnation."""
    s = localstore.TaskStore.open(str(root), "seen", str(state[0]), 0, application_id="")
    return sorted(s.pairs())


@pytest.mark.parametrize("collide", [False, True], ids=["digests", "one-digest"])
@pytest.mark.parametrize("key", ["string", "binary"])
def test_awkward_keys_survive_a_copy_built_caught_up_and_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, collide: bool
) -> None:
    """A standby copy of a store of awkward keys, built, caught up by standby rounds
    (puts and removals of long keys), behind by one batch and promoted, holds exactly the
    task's own store: every key itself (one digest for all long keys: every long key goes
    by its slot's number), and the output is a clean run's, each result once."""
    if collide:
        monkeypatch.setattr(localstore.TaskStore, "digest", staticmethod(lambda k: bytes(16)))
    bs = awkward_batches(key)
    clean = Task(tmp_path / "clean", monkeypatch, key)
    t = Task(tmp_path / "t", monkeypatch, key)
    try:
        clean.on("x")
        want = [clean.step(b)[0] for b in bs]
        for i, b in enumerate(bs[:3]):
            t.on("a")
            assert t.step(b)[0] == want[i]
            [row] = t.keep_copy("b")
            assert row["kind"] == "standby" and (i == 0 or row["entries"] > 0)
            copy = local_pairs(tmp_path / "t" / "b", t.state.value)
            assert copy == local_pairs(tmp_path / "t" / "a", t.state.value)
        t.on("a")
        assert t.step(bs[3])[0] == want[3]  # the copy misses this batch
        t.on("b")  # executor a is lost
        out, local = t.step(bs[4])
        assert out == want[4] and set(local) == {"local_caught_up", "local_promoted"}
        assert local_pairs(tmp_path / "t" / "b", t.state.value) == local_pairs(
            tmp_path / "clean" / "x", clean.state.value
        )
    finally:
        close_local_stores()
