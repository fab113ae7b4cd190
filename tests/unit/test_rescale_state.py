"""The state re-split of a rescale, without Spark: every entry lands in exactly one new
task, the one ``pmod(hash, M)`` names, and the stream times never go back."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import resplit

from kspark_server import placement, rescale, taskstate

hashes = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def dedup_state(
    n_tasks: int, seen: dict[str, tuple[int, int]], times: list[int | None]
) -> list[dict[str, Any]]:
    """Old task states: each id in the task its hash names under ``n_tasks``."""
    states = [{"stream_time": times[t], "seen": {}, "hash": {}} for t in range(n_tasks)]
    for ident, (ts, h) in seen.items():
        s = states[h % n_tasks]
        s["seen"][ident] = ts
        s["hash"][ident] = h
    return states


def join_state(
    n_tasks: int, table: dict[str, tuple[list[int], list[Any], int]], buffer: list[tuple[int, int]]
) -> list[dict[str, Any]]:
    states = [
        {
            "stream_time": 100 + t,
            "table": {"time": 50 + t, "data": {}},
            "hash": {},
            "buffer": [],
        }
        for t in range(n_tasks)
    ]
    for hk, (tss, vals, h) in table.items():
        s = states[h % n_tasks]
        s["table"]["data"][hk] = (tss, vals)
        s["hash"][hk] = h
    for i, (ts, h) in enumerate(buffer):
        states[h % n_tasks]["buffer"].append(
            {"timestamp": ts, "ks_seq": i, "ks_sub": 0, "ks_hash": h, "key": f"b{i}"}
        )
    return states


def run(
    kind: str, versioned: bool, states: list[dict[str, Any]], m: int
) -> tuple[pd.DataFrame, int]:
    blobs = [taskstate.encode_base(kind, versioned, s) for s in states]
    frame = pd.DataFrame({"blob": blobs, "first": [True] * len(blobs), "log": [None] * len(blobs)})
    parts = pd.concat(
        list(resplit.split_states(kind, versioned, m)(iter([frame]))), ignore_index=True
    )
    old = int(parts["old_entries"].sum())
    parts = parts[parts["ks_task"] >= 0]
    merged = [resplit.merge_states(kind, versioned, m)(g) for _, g in parts.groupby("ks_task")]
    return (
        pd.concat(merged, ignore_index=True)
        if merged
        else pd.DataFrame(columns=["ks_task", "blob", "entries"])
    ), old


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5),
    m=st.integers(1, 5),
    seen=st.dictionaries(
        st.text(min_size=1, max_size=4), st.tuples(st.integers(0, 1000), hashes), max_size=30
    ),
    times=st.lists(st.one_of(st.none(), st.integers(0, 2000)), min_size=5, max_size=5),
)
def test_dedup_entries_move_to_their_new_task(
    n: int, m: int, seen: dict[str, tuple[int, int]], times: list[int | None]
) -> None:
    states = dedup_state(n, seen, times)
    new, old = run("dedup", False, states, m)
    assert old == len(seen) == int(new["entries"].sum())
    got: dict[str, tuple[int, int]] = {}
    for key, blob in zip(new["ks_task"], new["blob"], strict=True):
        task = placement.task_of(key)
        assert placement.task_keys(m)[task] == key
        s = taskstate.materialize("dedup", False, [blob], [])
        for ident, ts in s["seen"].items():
            assert ident not in got, "an entry in two new tasks"
            assert s["hash"][ident] % m == task
            got[ident] = (ts, s["hash"][ident])
            # the new task's stream time is at least the one its entry had before
            before = states[s["hash"][ident] % n]["stream_time"]
            assert before is None or (s["stream_time"] is not None and s["stream_time"] >= before)
    assert got == seen


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 4),
    m=st.integers(1, 6),
    table=st.dictionaries(
        st.text(min_size=1, max_size=3),
        st.tuples(st.just([1, 5]), st.just(["a", None]), hashes),
        max_size=20,
    ),
    buffer=st.lists(st.tuples(st.integers(0, 100), hashes), max_size=10),
)
def test_versioned_join_state_keeps_every_version_and_buffered_record(
    n: int, m: int, table: dict[str, Any], buffer: list[tuple[int, int]]
) -> None:
    states = join_state(n, table, buffer)
    new, old = run("join", True, states, m)
    assert old == len(table) + len(buffer) == int(new["entries"].sum())
    keys: dict[str, Any] = {}
    buffered = 0
    for key, blob in zip(new["ks_task"], new["blob"], strict=True):
        task = placement.task_of(key)
        s = taskstate.materialize("join", True, [blob], [])
        for hk, versions in s["table"]["data"].items():
            assert s["hash"][hk] % m == task and hk not in keys
            keys[hk] = versions
        for r in s["buffer"]:
            assert r["ks_hash"] % m == task
        assert [r["timestamp"] for r in s["buffer"]] == sorted(r["timestamp"] for r in s["buffer"])
        buffered += len(s["buffer"])
        assert s["table"]["time"] >= 50 and s["stream_time"] >= 100
    assert keys == {k: (v[0], v[1]) for k, v in table.items()}
    assert buffered == len(buffer)


def test_state_without_hashes_is_refused() -> None:
    old = {"stream_time": 5, "seen": {"a": 1}}  # no hash recorded for "a"
    with pytest.raises(rescale.UnhashedState, match="hash"):
        rescale.split("dedup", False, old, 4)


def test_a_changed_entry_changes_the_checksum_of_its_task() -> None:
    from kspark_server import rescale as r
    from kspark_server import taskstate as ts

    st = ts.empty("dedup", False)
    st["seen"].update(a=5, b=7, c=9)
    st["hash"].update(a=1, b=2, c=3)
    parts = r.split("dedup", False, st, 2)
    merged = {t: r.merge("dedup", False, [p]) for t, p in parts.items()}
    total = sum(r.checksum("dedup", False, m) for m in merged.values())
    assert total == r.checksum("dedup", False, st)
    merged[1]["seen"]["b"] = 8  # one entry's value changed in the rewrite
    assert sum(r.checksum("dedup", False, m) for m in merged.values()) != total
