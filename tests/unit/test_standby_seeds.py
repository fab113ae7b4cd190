"""Standby replicas of a rescaled layout's tasks that have committed no state of their own
yet, without Spark.

After a rescale, a new task runs on its seed (the group state that names the files the
rescale built, :mod:`kspark_server.regroup`) until records reach it. The standby keeper
reads the committed group states with the seeds standing in for such tasks
(:func:`kspark.runtime.stores.files.group_states`), so its copies are built from the
seeds: an executor that takes such a task over after losing its own (or the first run
after a crash, whose tasks still start from their seeds) promotes the copy instead of
rebuilding, and the output is a clean run's.
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.taskharness import close_local_stores
from test_grouped_runner_files import pa_table, spec
from test_regroup import Layout, M, N, build, catch_up, hash_of, seeds

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.runtime import standbys
from kspark_server import placement, standby
from kspark_server.operators.grouped import frame_table

#: no expiry: stream time, which is per task, plays no part in the output
INTERVAL = 10**6


def records(n: int, start: int = 0) -> list[tuple[int, Any]]:
    return [(i, (0, f"k{i % 11}", f"v{i}", i)) for i in range(start, start + n)]


def on(mp: pytest.MonkeyPatch, disk: Path) -> None:
    """Run on the executor whose disk is ``disk``."""
    close_local_stores()
    mp.setenv("KSPARK_LOCAL_STATE_DIR", str(disk))


def keep_round(root: str, committed: dict[int, tuple[Any, ...]]) -> dict[int, tuple[str, int]]:
    """A standby job's task on the current executor, keeping every task's copy: each
    task's report (kind, entries written)."""
    fn = standby.keep([(spec(INTERVAL), committed)], root, None)
    [report] = list(fn(iter([pd.DataFrame({"id": [0]})])))
    return {int(r["task"]): (str(r["kind"]), int(r["entries"])) for _, r in report.iterrows()}


def run(layout: Layout, batch: list[tuple[int, Any]]) -> tuple[list[Any], dict[int, set[str]]]:
    """:meth:`Layout.run`, with the kinds of local store each task opened."""
    out: list[Any] = []
    local: dict[int, set[str]] = {}
    for t in range(layout.tasks):
        mine = [(i, r) for i, r in batch if hash_of(r) % layout.tasks == t]
        if not mine:
            continue
        key = (placement.task_keys(layout.tasks)[t],)
        for f in layout.fn(key, iter([pa_table(mine)]), layout.states[t]):
            rows = frame_table([f], layout.declared).to_pylist()
            out.extend(r for r in rows if not r["ks_side"])
            sides = [json.loads(r["ks_side"]) for r in rows if r["ks_side"]]
            local.setdefault(t, set()).update(
                s["kind"] for s in sides if s["kind"].startswith("local_")
            )
    return sorted((r["ks_seq"], r["key"], r["value"]) for r in out), local


def test_a_standby_copy_of_a_seeded_task_is_promoted_after_its_executor_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rescale builds the new tasks' stores on executor a; a standby round on executor
    b keeps copies of them from their seeds (on a, the stores are the tasks' own); a
    batch that reaches one task only commits that task's own version, and the next round
    catches its copy up while the others stay at their seeds. Executor a is lost: on b
    every task, seeded or not, promotes its copy as it is, and the output is a clean
    run's."""
    a, b = tmp_path / "a", tmp_path / "b"
    new_root = str(tmp_path / "new")
    try:
        on(monkeypatch, a)
        old = Layout(str(tmp_path / "old"), N, INTERVAL)
        ref = Layout(str(tmp_path / "ref"), 1, INTERVAL)  # one task: a clean run
        first = records(30)
        assert old.run(first) == ref.run(first)
        metas = build(old, new_root, INTERVAL)
        second = records(8, 30)
        old.run(second)
        ref.run(second)
        metas = catch_up(old, new_root, metas, INTERVAL)
        seeded = seeds(metas)
        assert sorted(seeded) == list(range(M))
        # a standby round before any new task ran: the group states are the seeds
        assert keep_round(new_root, seeded) == {t: ("active", 0) for t in seeded}
        on(monkeypatch, b)
        copies = keep_round(new_root, seeded)
        assert {t: k for t, (k, _) in copies.items()} == {t: "standby" for t in seeded}
        assert all(n > 0 for _, n in copies.values())

        # the switch: a batch of one key reaches one task, which commits its own version
        on(monkeypatch, a)
        new = Layout(new_root, M, INTERVAL, seeded)
        third = [(100, (0, "new", "w", 100)), (101, (0, "k3", "w", 101))]
        got, local = run(new, third[:1])
        assert got == ref.run(third[:1]) != []
        (ran,) = local
        assert local[ran] == {"local_reused"}  # the store the rescale built
        committed = {t: new.states[t].value or s for t, s in seeded.items()}
        assert committed[ran] != seeded[ran] and int(committed[ran][1]) > int(seeded[ran][1])
        on(monkeypatch, b)
        again = keep_round(new_root, committed)
        assert {t: k for t, (k, _) in again.items()} == {t: "standby" for t in seeded}
        assert all(n == 0 for t, (_, n) in again.items() if t != ran)  # still at their seeds
        assert again[ran][1] > 0

        # executor a is lost: its tasks run on b, seeded ones from their seeds
        on(monkeypatch, b)
        rest = third[1:] + [(200 + i, r) for i, r in records(22, 200)]
        got, local = run(new, rest)
        assert got == ref.run(rest)
        assert len(local) == M
        assert all(kinds == {"local_reused", "local_promoted"} for kinds in local.values())
    finally:
        close_local_stores()


def test_the_keeper_reads_each_stores_seeds_at_its_task_keys() -> None:
    """The keeper stands a generation's seeds (store -> task number -> group state) in for
    the tasks of each store's operator that have committed nothing: at that operator's own
    task keys, which the standby round's rows carry."""
    bld = StreamsBuilder()
    s = bld.stream("in", key_type=str, value_type=str)
    s.deduplicate_by_key(timedelta(seconds=5)).group_by_key().count(
        materialized=Materialized.as_("counts")
    ).to_stream().to("out")
    config = StreamsConfig(
        application_id="two", data_dir=tempfile.mkdtemp(), num_partitions=3, num_standby_replicas=1
    )
    output = StreamsApp(bld.build(), config, session=object()).compiled()
    fields = standby._FIELDS
    probe = standbys.StandbyKeeper(object(), object(), output, 1, "chk")
    dedup = next(store for store in probe.specs if store != "counts")

    def seed(store: str, t: int) -> list[Any]:
        return [f"{store}-{t}", 1, 0, 0, 0, 1, 1, f"id{t}", ""]

    gen = {dedup: {"0": seed(dedup, 0)}, "counts": {"1": seed("counts", 1), "2": seed("counts", 2)}}
    k = standbys.StandbyKeeper(object(), object(), output, 1, "chk", gen)
    keys = {store: tuple(ks or ()) for store, ks in k.keys.items()}
    assert set(k.seeds) == {keys[dedup][0], keys["counts"][1], keys["counts"][2]}
    # the round's rows: group_states with no own state committed yet, the seeds alone
    rows = [{"ks_task": key, **dict(zip(fields, v, strict=True))} for key, v in k.seeds.items()]
    committed = standby.committed_by_store(rows, k.keys)
    assert {st: sorted(c) for st, c in committed.items()} == {dedup: [0], "counts": [1, 2]}
    assert committed["counts"][2][0] == "counts-2" and committed[dedup][0][0] == f"{dedup}-0"
