"""State format 6: a task's base is a sequence of bounded chunks. Whatever the chunk size,
the chunks read back as the state (with its log), each chunk's share stands for a disjoint
part of the task, a local store rebuilt chunk by chunk holds the state, and a rescale
through chunked parts keeps every entry."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import resplit

from kspark_server import localstore, placement, queries, rescale, stateenc, taskstate

keys = st.sampled_from([f"k{i}" for i in range(12)])
# (put?, key, timestamp) per batch
ops = st.lists(
    st.lists(st.tuples(st.booleans(), keys, st.integers(0, 100)), max_size=8),
    max_size=6,
)
limits = st.sampled_from([1, 20, 60, 200, 1 << 30])


def join_state(n: int) -> dict[str, Any]:
    """A latest-value table task with ``n`` keys and a grace buffer."""
    s = taskstate.empty("join", False)
    for i in range(n):
        s["table"][f"k{i}"] = f"value-{i}" * (i % 3 + 1)
        s["hash"][f"k{i}"] = i * 31
    s["stream_time"] = 50
    s["buffer"] = [{"timestamp": 40, "ks_seq": 1, "ks_sub": 0, "ks_hash": 7, "key": "k1"}]
    return s


def step(s: dict[str, Any], batch: list[tuple[bool, str, int]]) -> bytes:
    """A batch on a table task, and its change as the operator logs it."""
    touched = set()
    for put, k, ts in batch:
        if put:
            s["table"][k] = f"v{ts}"
            s["hash"][k] = ts
        else:
            s["table"].pop(k, None)
            s["hash"].pop(k, None)
        s["stream_time"] = max(ts, s["stream_time"] or 0)
        touched.add(k)
    s["buffer"] = [{"timestamp": ts, "ks_seq": ts, "ks_sub": 0, "ks_hash": ts} for *_, ts in batch]
    return stateenc.encode_frame(
        taskstate.scalars("join", False, s),
        taskstate.change_pairs("join", False, s, sorted(touched)),
    )


@settings(max_examples=120, deadline=None)
@given(n=st.integers(0, 12), batches=ops, limit=limits)
def test_chunks_and_log_read_back_as_the_state(n: int, batches: list[Any], limit: int) -> None:
    s = join_state(n)
    base = taskstate.base_chunks("join", False, s, limit)
    assert base, "a base always has a chunk 0"
    if limit == 1:  # one key per chunk
        assert len(base) == max(n, 1)
    # only chunk 0 carries the grace buffer
    assert all("buffer" not in stateenc.decode_frame(c)[0] for c in base[1:])
    log = [step(s, b) for b in batches]
    assert taskstate.materialize("join", False, base, log) == s
    sc, pairs = taskstate.merge_pairs(base, log)
    assert taskstate.from_pairs("join", False, sc, pairs) == s
    # each chunk's share: disjoint, and together the state
    shares = [taskstate.share(c, i == 0, log) for i, c in enumerate(base)]
    union: dict[bytes, bytes] = {}
    for _, p in shares:
        assert not set(p) & set(union)
        union.update(p)
    assert union == pairs
    assert shares[0][0] == sc
    assert all(s_.get("buffer") is None for s_, _ in shares[1:])


def test_queries_read_a_task_chunk_by_chunk() -> None:
    s = join_state(9)
    base = taskstate.base_chunks("join", False, s, 30)
    log = [step(s, [(True, "k20", 60), (False, "k3", 61)])]
    frame = pd.DataFrame(
        {"blob": base, "first": [i == 0 for i in range(len(base))], "log": [log] * len(base)}
    )
    assert len(base) > 3
    counted = pd.concat(list(queries.count()(iter([frame]))))
    assert int(counted["entries"].sum()) == len(s["table"]) == 9
    wanted = [stateenc.pack(k) for k in ("k20", "k3", "k5")]
    found = pd.concat(list(queries.lookup(wanted)(iter([frame]))))
    assert sorted(stateenc.unpack(k) for k in found["key"]) == ["k20", "k5"]
    scanned = pd.concat(list(queries.scan()(iter([frame]))))
    assert sorted(stateenc.unpack(k) for k in scanned["key"]) == sorted(s["table"])


def _tasks_to_frame(states: list[dict[str, Any]], limit: int) -> pd.DataFrame:
    rows = []
    for s in states:
        for i, c in enumerate(taskstate.base_chunks("join", False, s, limit)):
            rows.append({"blob": c, "first": i == 0, "log": None})
    return pd.DataFrame(rows)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3), m=st.integers(1, 4), size=st.integers(0, 30), limit=limits)
def test_a_rescale_through_chunks_keeps_every_entry(n: int, m: int, size: int, limit: int) -> None:
    # n old tasks, each key in the task of its hash
    states = [join_state(0) for _ in range(n)]
    for t, s in enumerate(states):
        s["buffer"] = [{"timestamp": 40 + t, "ks_seq": t, "ks_sub": 0, "ks_hash": t}]
    for i in range(size):
        h = i * 7919
        states[h % n]["table"][f"x{i}"] = f"value-{i}"
        states[h % n]["hash"][f"x{i}"] = h
    frame = _tasks_to_frame(states, limit)
    parts = pd.concat(list(resplit.split_states("join", False, m, limit)(iter([frame]))))
    assert int((parts["ks_task"] == -1).sum()) == n  # tasks, not chunks
    assert int(parts["old_entries"].sum()) == size + n  # entries and buffered records
    parts = parts[parts["ks_task"] >= 0]
    total = 0
    for _, g in parts.groupby("ks_task"):
        out = resplit.merge_states("join", False, m, limit)(g)
        assert list(out["chunk"]) == list(range(len(out)))
        st_ = taskstate.materialize("join", False, out["blob"].tolist(), [])
        task = placement.task_of(int(out["ks_task"].iat[0]))
        assert int(out["entries"].sum()) == rescale.entries("join", False, st_)
        assert int(out["checksum"].sum()) == rescale.checksum("join", False, st_)
        checked = pd.concat(list(resplit.check_states("join", False)(iter([out]))))
        assert int(checked["checksum"].sum()) == int(out["checksum"].sum())
        assert all(h % m == task for h in st_["hash"].values())
        assert all(int(r["ks_hash"]) % m == task for r in st_["buffer"])
        total += rescale.entries("join", False, st_)
    assert total == size + n


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 12), batches=ops, limit=limits)
def test_a_local_store_rebuilds_chunk_by_chunk(
    n: int, batches: list[Any], limit: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A rebuild (with a time index, as deduplication keeps) reads the chunks one at a
    time, then the log, and ends with the state's entries, index and scalars."""
    s = taskstate.empty("dedup", False)
    for i in range(n):
        s["seen"][f"k{i}"] = i
        s["hash"][f"k{i}"] = i
    s["stream_time"] = n
    base = taskstate.base_chunks("dedup", False, s, limit)
    log = []
    for batch in batches:
        touched = set()
        for put, k, ts in batch:
            if put:
                s["seen"][k], s["hash"][k] = ts, ts
            else:
                s["seen"].pop(k, None)
                s["hash"].pop(k, None)
            touched.add(k)
        log.append(
            stateenc.encode_frame(
                taskstate.scalars("dedup", False, s),
                taskstate.change_pairs("dedup", False, s, sorted(touched)),
            )
        )
    read: list[int] = []

    def chunks() -> Any:
        for i, c in enumerate(base):
            read.append(i)
            yield c

    def index_of(k: bytes, e: bytes) -> bytes:
        return localstore.time_key(int(stateenc.unpack(e)[0]), k)

    store = localstore.TaskStore(str(tmp_path_factory.mktemp("rebuild")))
    try:
        store.apply([(stateenc.pack("stale"), stateenc.pack([1, 1]))], {}, ("old", 3))
        store.rebuild(chunks(), log, ("inc", 7), index_of)
        assert read == list(range(len(base)))
        assert store.version == ("inc", 7)
        got = taskstate.from_pairs("dedup", False, store.scalars(), dict(store.pairs()))
        assert got == s
        # the time index holds exactly the live entries, by time
        due = [stateenc.unpack(k) for k in store.due(1 << 40)]
        assert due == sorted(s["seen"], key=lambda k: (s["seen"][k], stateenc.pack(k)))
    finally:
        store.destroy()


def test_the_chunk_size_is_a_parameter() -> None:
    """The default chunk size is 32 MiB; a smaller one (``StreamsConfig``'s
    ``state_base_chunk_bytes``, passed down) splits a base, which reads back alike."""
    s = join_state(12)
    assert len(taskstate.base_chunks("join", False, s)) == 1
    assert len(taskstate.base_chunks("join", False, s, 100)) > 1
    assert copy.deepcopy(s) == taskstate.materialize(
        "join", False, taskstate.base_chunks("join", False, s, 100), []
    )
    assert list(itertools.islice(taskstate.iter_chunks({}, []), 2)) == [
        stateenc.encode_frame({}, [])
    ]
