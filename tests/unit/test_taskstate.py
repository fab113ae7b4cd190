"""A task state stored as a base and a log of changes reads back as the state itself, for
any sequence of batches: the changes record every key a batch touched, and expiry reports
the keys it trimmed."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import resplit

from kspark_server import stateenc, taskstate
from kspark_server.versioned import VersionedStore

keys = st.sampled_from([f"k{i}" for i in range(8)])


def stored(
    kind: str, versioned: bool, batches: list[Any], step: Any, initial: dict[str, Any]
) -> tuple[dict[str, Any], bytes, list[bytes]]:
    """Run ``step`` over ``batches`` as the operator would: the first writes a base, later
    ones append changes (compaction off) or write a new base (compaction on)."""
    state = copy.deepcopy(initial)
    base = taskstate.encode_base(kind, versioned, state)
    log: list[bytes] = []
    for batch in batches:
        touched: set[Any] = set()
        step(state, batch, touched)
        change = change_of(kind, versioned, state, touched)
        if taskstate.should_compact(len(base), sum(map(len, log)) + len(change), len(log) + 1):
            base, log = taskstate.encode_base(kind, versioned, state), []
        else:
            log.append(change)
        assert taskstate.materialize(kind, versioned, [base], log) == state
    return state, base, log


def change_of(kind: str, versioned: bool, state: dict[str, Any], touched: set[Any]) -> bytes:
    """A batch's change, as the operator writes it."""
    return stateenc.encode_frame(
        taskstate.scalars(kind, versioned, state),
        taskstate.change_pairs(kind, versioned, state, sorted(touched)),
    )


dedup_ops = st.lists(
    st.lists(st.tuples(st.booleans(), keys, st.integers(0, 100)), max_size=6),
    min_size=1,
    max_size=12,
)


def dedup_step(
    state: dict[str, Any], batch: list[tuple[bool, str, int]], touched: set[Any]
) -> None:
    for put, k, ts in batch:
        if put:
            state["seen"][k] = ts
            state["hash"][k] = ts * 7
        else:
            state["seen"].pop(k, None)
            state["hash"].pop(k, None)
        state["stream_time"] = max(ts, state["stream_time"] or 0)
        touched.add(k)


@settings(max_examples=80, deadline=None)
@given(batches=dedup_ops, big=st.booleans())
def test_dedup_state_reads_back_from_base_and_log(batches: list[Any], big: bool) -> None:
    initial = {"format": taskstate.STATE_FORMAT, "stream_time": None, "seen": {}, "hash": {}}
    if big:  # a base big enough that changes are logged, not rewritten
        initial["seen"] = {f"x{i}": i for i in range(2000)}
        initial["hash"] = {f"x{i}": i for i in range(2000)}
    _, _, log = stored("dedup", False, batches, dedup_step, initial)
    if big:
        assert len(log) == len(batches)


join_ops = st.lists(
    st.lists(
        st.tuples(keys, st.one_of(st.none(), st.integers(0, 9)), st.integers(0, 300)), max_size=6
    ),
    min_size=1,
    max_size=12,
)


def join_step(
    state: dict[str, Any], batch: list[tuple[str, int | None, int]], touched: set[Any]
) -> None:
    store = VersionedStore(state["table"], history_retention_ms=50)
    for k, v, ts in batch:
        state["hash"][k] = 1
        touched.add(k)
        store.put(k, v, ts)
        state["stream_time"] = max(ts, state["stream_time"] or 0)
    state["buffer"] = [{"timestamp": ts} for _, _, ts in batch[:2]]
    store.expire(touched)
    for k in [k for k in state["hash"] if k not in state["table"]["data"]]:
        del state["hash"][k]


@settings(max_examples=80, deadline=None)
@given(batches=join_ops)
def test_versioned_join_state_reads_back_with_expiry(batches: list[Any]) -> None:
    initial = {
        "format": taskstate.STATE_FORMAT,
        "stream_time": None,
        "buffer": [],
        "hash": {f"x{i}": 1 for i in range(300)},
        "table": {"time": None, "data": {f"x{i}": ([0], [i]) for i in range(300)}},
    }
    stored("join", True, batches, join_step, initial)


def test_expiry_without_a_recorded_key_is_caught() -> None:
    """The check can fail: a change that misses an expired key does not read back."""
    state = {
        "format": taskstate.STATE_FORMAT,
        "stream_time": None,
        "buffer": [],
        "hash": {"a": 1},
        "table": {"time": None, "data": {"a": ([0, 10], [1, 2])}},
    }
    base = taskstate.encode_base("join", True, state)
    store = VersionedStore(state["table"], history_retention_ms=5)
    store.put("b", 3, 100)
    state["hash"]["b"] = 1
    store.expire()  # trims "a" without reporting it
    change = change_of("join", True, state, {"b"})
    assert taskstate.materialize("join", True, [base], [change]) != state


def test_rescale_reads_the_log() -> None:
    state = {"format": taskstate.STATE_FORMAT, "stream_time": 1, "seen": {"a": 1}, "hash": {"a": 4}}
    base = taskstate.encode_base("dedup", False, state)
    state["seen"]["b"] = 2
    state["hash"]["b"] = 5
    change = change_of("dedup", False, state, {"b"})
    frame = pd.DataFrame({"blob": [base], "first": [True], "log": [[change]]})
    parts = pd.concat(list(resplit.split_states("dedup", False, 2)(iter([frame]))))
    assert int(parts["old_entries"].sum()) == 2
    moved = {
        t: taskstate.materialize("dedup", False, [b], [])["seen"]
        for t, b in zip(parts["ks_task"], parts["part"], strict=True)
        if t >= 0
    }
    assert moved == {0: {"a": 1}, 1: {"b": 2}}


def test_state_is_never_unpickled() -> None:
    """Bytes that are not a state frame (here a pickle that would run code) are refused,
    never loaded."""

    class Boom:
        def __reduce__(self) -> Any:
            return (exec, ("raise SystemExit('pickle ran code')",))

    planted = pickle.dumps({"stream_time": 1, "seen": {"a": Boom()}, "hash": {}})
    with pytest.raises(stateenc.StateFormatError, match="not a kspark state frame"):
        taskstate.materialize("dedup", False, [planted], [])


def test_a_frame_of_another_state_format_is_refused_naming_it() -> None:
    frame = stateenc.encode_frame({"stream_time": 1}, [])
    body = stateenc.unpack(frame[len(stateenc.MAGIC) :])
    body["format"] = stateenc.FORMAT + 1
    other = stateenc.MAGIC + stateenc.pack(body)
    with pytest.raises(stateenc.StateFormatError, match=f"state format {stateenc.FORMAT + 1}"):
        taskstate.materialize("dedup", False, [other], [])
