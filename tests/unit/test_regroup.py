"""Rescaling the stateful operators' files, driven without Spark.

Dedup tasks of an old layout run through :class:`GroupedOperator` (a stand-in for Spark's
group state); a new layout is built from their committed files
(:func:`kspark_server.regroup.build_tasks`) and caught up from their change files while
they go on (:func:`kspark_server.regroup.catch_up_tasks`). Over random records, batch
splits and catch-up points, the new layout is at every step exactly what an offline
rescale of the old layout's committed state gives, its local stores hold the same, and
the app run on in the new layout gives the output of one clean run.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.keycorpus import corpus_keys
from support.taskharness import close_local_stores
from test_grouped_runner_files import GroupState, declared, pa_table, spec

from kspark_server import localstore, placement, regroup, rescale, taskfiles, taskstate
from kspark_server.operators.grouped import GroupedOperator, frame_table
from kspark_server.taskreads import FIELDS

N, M = 2, 3


class Layout:
    """The tasks of one layout: their group states and files under ``root``."""

    def __init__(
        self,
        root: str,
        tasks: int,
        interval: int,
        seeds: Any = None,
        check_log: bool = True,
        key: str = "string",
    ) -> None:
        self.root, self.tasks = root, tasks
        # without checks, small bases compact
        sp = spec(interval, check_log, key)
        self.fn = GroupedOperator(sp, "", "", root, seeds)
        self.declared = declared(key)
        self.states = [GroupState() for _ in range(tasks)]

    def run(self, batch: list[tuple[int, Any]]) -> list[Any]:
        out: list[Any] = []
        for t in range(self.tasks):
            mine = [(i, r) for i, r in batch if hash_of(r) % self.tasks == t]
            if not mine:
                continue
            key = (placement.task_keys(self.tasks)[t],)
            for f in self.fn(key, iter([pa_table(mine)]), self.states[t]):
                out.extend(
                    r for r in frame_table([f], self.declared).to_pylist() if not r["ks_side"]
                )
        return sorted((r["ks_seq"], r["key"], r["value"]) for r in out)

    def committed(self) -> dict[int, tuple[Any, ...]]:
        return {t: s.value for t, s in enumerate(self.states) if s.exists}

    def task_state(self, t: int, committed: Any) -> Any:
        f = taskfiles.TaskFiles(self.root, "seen", t, committed, create=False)
        return taskstate.materialize("dedup", False, list(f.chunks()), [b for (b,) in f.log.get()])


def hash_of(rec: Any) -> int:
    key = rec[1]
    return hash(key) % 1000 if key is not None else 42


def offline(old: Layout) -> dict[int, Any]:
    """Each new task's state as an offline re-split of the old layout's committed state."""
    parts: dict[int, list[Any]] = {}
    for t, committed in sorted(old.committed().items()):
        for task, p in rescale.split("dedup", False, old.task_state(t, committed), M).items():
            parts.setdefault(task, []).append(p)
    return {t: rescale.merge("dedup", False, ps) for t, ps in parts.items()}


def build(old: Layout, new_root: str, interval: int, key: str = "string") -> dict[int, bytes]:
    olds = old.committed()
    frame = pd.DataFrame(
        [(placement.task_keys(N)[t], *v) for t, v in olds.items()], columns=["ks_task", *FIELDS]
    )
    parts = pd.concat(list(regroup.split_files(old.root, "seen", "dedup", False, M)(iter([frame]))))
    parts = pd.concat(
        [
            parts,
            pd.DataFrame(
                [(k, regroup.MARKER, None, 0, 0) for k in placement.task_keys(M)],
                columns=parts.columns,
            ),
        ]
    )
    sp = spec(interval, key=key)
    positions = {t: int(v[1]) for t, v in olds.items()}
    metas: dict[int, bytes] = {}
    for _key, group in parts.groupby("ks_task"):  # one partition per new task
        for out in regroup.build_tasks(sp, new_root, M, positions)(iter([group])):
            for task, meta in zip(out["ks_task"], out["meta"], strict=True):
                if task != -1:
                    metas[int(task)] = meta
    return metas


def catch_up(
    old: Layout, new_root: str, metas: dict[int, bytes], interval: int, key: str = "string"
) -> dict[int, bytes]:
    fn = regroup.catch_up_tasks(spec(interval, key=key), old.root, new_root, M, N, old.committed())
    keys = placement.task_keys(M)
    out = {}
    for t, meta in metas.items():
        for got in fn(iter([pd.DataFrame({"ks_task": [keys[t]], "meta": [meta]})])):
            out[int(got["ks_task"][0])] = got["meta"][0]
    return out


def seeds(metas: dict[int, bytes]) -> dict[int, tuple[Any, ...]]:
    out = {}
    for t, blob in metas.items():
        meta = regroup.unpack_meta(blob)
        if any(meta["cnt"].values()):
            out[t] = tuple(meta["seed"])
    return out


records = st.lists(
    st.tuples(st.sampled_from([f"k{i}" for i in range(15)]), st.integers(0, 60)),
    min_size=2,
    max_size=50,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@example(
    data=[(f"k{i}", i) for i in range(15)] + [(f"k{i % 4}", 20 + i) for i in range(20)],
    interval=10**6,
    cuts=[5, 15, 20, 25, 30],
    build_at=1,
    rounds=[2, 3],
)
@given(
    data=records,
    interval=st.sampled_from([5, 30, 10**6]),
    cuts=st.lists(st.integers(1, 49), min_size=2, max_size=6, unique=True),
    build_at=st.integers(1, 3),
    rounds=st.lists(st.integers(1, 6), max_size=3),
)
def test_warm_layout_is_the_offline_rescale_at_every_round(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[str, int]],
    interval: int,
    cuts: list[int],
    build_at: int,
    rounds: list[int],
) -> None:
    tmp = tmp_path_factory.mktemp("regroup")
    recs = [(i, (0, k, f"e{i}", ts)) for i, (k, ts) in enumerate(data)]
    bounds = [0, *sorted(c for c in cuts if c < len(recs)), len(recs)]
    batches = [recs[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    switch_at = min(len(batches) - 1, build_at + len(rounds))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp / "local"))
        try:
            old = Layout(str(tmp / "old"), N, interval)
            ref = Layout(str(tmp / "ref"), 1, interval)  # one task: a clean run
            got_out, want_out = [], []
            metas: dict[int, bytes] = {}
            new_root = str(tmp / "new")
            for i, batch in enumerate(batches[: switch_at + 1]):
                got_out += old.run(batch)
                want_out += ref.run(batch)
                if i + 1 == build_at:
                    metas = build(old, new_root, interval)
                elif metas and i + 1 > build_at:
                    metas = catch_up(old, new_root, metas, interval)
                if metas:
                    want = offline(old)
                    new = Layout(new_root, M, interval)
                    for t, seed in seeds(metas).items():
                        assert new.task_state(t, seed) == want[t], (i, t)
                    assert set(seeds(metas)) == set(want)
            if not metas:
                return
            # the switch: the new layout's tasks start from their seeds, and go on
            new = Layout(new_root, M, interval, seeds(metas))
            for batch in batches[switch_at + 1 :]:
                got_out += new.run(batch)
                want_out += ref.run(batch)
            if interval == 10**6:  # no expiry: stream time, which is per task, plays no part
                assert sorted(got_out) == sorted(want_out)
        finally:
            close_local_stores()


def test_a_new_base_in_an_old_task_is_re_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old task that writes a new base between two rounds (its change files go) is
    re-read whole for the new tasks: still the offline rescale's state."""
    monkeypatch.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp_path / "local"))
    try:
        old = Layout(str(tmp_path / "old"), N, 10**6, check_log=False)
        old.run([(i, (0, f"k{i}", "v", i)) for i in range(12)])
        metas = build(old, str(tmp_path / "new"), 10**6)
        # a batch that changes most keys: each task writes a new base
        old.run(
            [(100 + i, (0, f"k{i}", "w", 50 + i)) for i in range(12)] + [(200, (0, "z", "v", 90))]
        )
        for t, committed in old.committed().items():
            assert taskfiles.TaskFiles(old.root, "seen", t, committed).just_compacted()
        metas = catch_up(old, str(tmp_path / "new"), metas, 10**6)
        want = offline(old)
        new = Layout(str(tmp_path / "new"), M, 10**6)
        for t, seed in seeds(metas).items():
            assert new.task_state(t, seed) == want[t]
    finally:
        close_local_stores()


def test_a_hold_keeps_the_old_tasks_files_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a rescale holds a store's files, a new base leaves the files it replaced; once
    the hold ends, the next new base collects them."""
    monkeypatch.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp_path / "local"))
    try:
        old = Layout(str(tmp_path / "old"), 1, 10**6, check_log=False)
        old.run([(0, (0, "a", "v", 1))])
        folder = tmp_path / "old" / "seen"
        taskfiles.hold(str(folder))
        for i in range(1, 4):
            old.run([(i, (0, f"k{i}", "v", i))])
        held = sorted(os.listdir(folder / "task-0"))
        assert len(held) == 4  # every base so far: none collected
        taskfiles.hold(str(folder), on=False)
        for i in range(4, 6):
            old.run([(i, (0, f"k{i}", "v", i))])
        assert len(os.listdir(folder / "task-0")) < len(held)
    finally:
        close_local_stores()


def local_pairs(meta: bytes, task: int) -> list[tuple[bytes, bytes]]:
    """The (key, entry) pairs of a new task's local store, as its build and catch-ups
    left it."""
    inc = regroup.unpack_meta(meta)["inc"]
    return sorted(localstore.TaskStore.open(localstore.root_dir(), "seen", inc, task).pairs())


def state_pairs(st: Any) -> list[tuple[bytes, bytes]]:
    keys = list(taskstate.maps("dedup", False, st)[0])
    return sorted((k, e) for k, e in taskstate.change_pairs("dedup", False, st, keys) if e)


@pytest.mark.parametrize("collide", [False, True], ids=["digests", "one-digest"])
@pytest.mark.parametrize(
    ("interval", "check_log"), [(10**6, True), (100, False)], ids=["kept-logged", "expired"]
)
@pytest.mark.parametrize("key", ["string", "binary"])
def test_awkward_keys_survive_a_warm_rescale(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    interval: int,
    check_log: bool,
    collide: bool,
) -> None:
    """Awkward keys and null keys through a warm rescale's build, catch-up rounds (puts,
    and removals of long keys when they expire; bases re-read whole when an old task
    compacts) and switch: at every round each new task's files and local store hold
    exactly the offline rescale's state, key for key (one digest for all long keys: every
    long key goes by its slot's number); after the switch, every key's record is a
    duplicate, and the output is a clean run's, each result once."""
    if collide:
        monkeypatch.setattr(localstore.TaskStore, "digest", staticmethod(lambda k: bytes(16)))
    monkeypatch.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp_path / "local"))
    keys = corpus_keys(key)
    half, back = keys[::2], [k for k in keys[1::2] if len(k) < 1000]
    stamps = [(1, 0, keys[:-1]), (2, 50, keys), (3, 200, half), (4, 205, back), (5, 210, keys)]
    batches = []
    for n, ts, ks in stamps:
        recs: list[Any] = [(0, k, f"v{n}-{i}", ts + i % 3) for i, k in enumerate(ks)]
        recs += [(0, None, f"null{n}-{i}", ts) for i in range(2)]
        batches.append([(100 * n + i, r) for i, r in enumerate(recs)])
    new_root = str(tmp_path / "new")
    try:
        old = Layout(str(tmp_path / "old"), N, interval, check_log=check_log, key=key)
        ref = Layout(str(tmp_path / "ref"), 1, interval, key=key)
        got_out, want_out = [], []
        metas: dict[int, bytes] = {}
        for i, batch in enumerate(batches[:-1]):
            got_out += old.run(batch)
            want_out += ref.run(batch)
            metas = (
                build(old, new_root, interval, key)
                if i == 0
                else catch_up(old, new_root, metas, interval, key)
            )
            want = offline(old)
            new = Layout(new_root, M, interval, key=key)
            assert set(seeds(metas)) == set(want)
            for t, seed in seeds(metas).items():
                assert new.task_state(t, seed) == want[t], (i, t)
                assert local_pairs(metas[t], t) == state_pairs(want[t]), (i, t)
        new = Layout(new_root, M, interval, seeds(metas), key=key)
        got_out += new.run(batches[-1])
        want_out += ref.run(batches[-1])
        if interval == 10**6:  # no expiry: stream time, which is per task, plays no part
            assert sorted(got_out) == sorted(want_out)
            assert [v for _, k, v in got_out if v.startswith("v5")] == []
    finally:
        close_local_stores()
