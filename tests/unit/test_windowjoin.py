"""The windowed stream-stream join operator, driven directly (no Spark): a property test
against a literal reference model over random micro-batch splits and restarts, with the
durable base and log checked against the local store after every batch."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import resplit, taskharness
from support.joinmodel import Rec, processing_order, stream_join_reference

from kspark_server import envelope as env
from kspark_server import placement
from kspark_server.operators.window_join import WindowJoinProcessor
from kspark_server.spec import KeyValue, Packed, PrimSpec, StateOptions, WindowJoinSpec

# -- the operator, fed as the lowering feeds it -----------------------------------------

STR = PrimSpec(spark="string")
KV = KeyValue(key=STR, value=STR)


def joiner(left: str | None, right: str | None) -> str:
    return f"{left}+{right}"


def make_spec(
    mode: str, before: int, after: int, grace: int, state: StateOptions | None = None
) -> WindowJoinSpec:
    return WindowJoinSpec(
        processor="JOIN",
        store="join-store",
        mode=mode,
        before_ms=before,
        after_ms=after,
        grace_ms=grace,
        joiner=joiner,
        joiner_with_key=False,
        left=KV,
        right=KV,
        output=KV,
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        state=state or StateOptions(),
    )


class Runner(taskharness.Runner):
    """One task of the operator across batches, with its late and dropped counts; the
    outputs in the order the operator emits them (the reference model's order)."""

    by_input_position = False

    def __init__(self, spec: WindowJoinSpec, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(lambda: WindowJoinProcessor(spec), tmp, monkeypatch)

    @property
    def late(self) -> int:
        return self.sides.get("late_records", 0)

    @property
    def dropped(self) -> int:
        return self.sides.get("dropped", 0)


close_local_stores = taskharness.close_local_stores


# -- the reference model ------------------------------------------------------------------


records = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["a", "b", "c", None]),
        st.sampled_from(["x", "y", None]) | st.sampled_from(["z"]),
        st.integers(0, 60),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    data=records,
    mode=st.sampled_from(["inner", "left", "outer"]),
    before=st.integers(-5, 12),
    after=st.integers(0, 12),
    grace=st.integers(0, 10),
    cuts=st.lists(st.integers(1, 29), max_size=4, unique=True),
    restarts=st.lists(st.integers(0, 5), max_size=2),
    ordered=st.booleans(),
)
def test_matches_reference_model(
    data: list[Rec],
    mode: str,
    before: int,
    after: int,
    grace: int,
    cuts: list[int],
    restarts: list[int],
    ordered: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if before + after < 0:
        before = -after
    if ordered:  # each stream's timestamps rise, as on most topics
        data = sorted(data, key=lambda r: (r[0], r[3]))
    mp = pytest.MonkeyPatch()
    # check the log; bases of several chunks: restarts rebuild the local store chunk by chunk
    checked = StateOptions(base_chunk_bytes=64, check_log=True)
    try:
        numbered = list(enumerate(data))
        # each stream in offset order, the two interleaved as they arrived
        bounds = [0, *sorted(c for c in cuts if c < len(numbered)), len(numbered)]
        batches = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        runner = Runner(
            make_spec(mode, before, after, grace, checked), tmp_path_factory.mktemp("wj"), mp
        )
        got: list[tuple[str | None, str, int]] = []
        seen: list[tuple[int, Rec]] = []
        for i, batch in enumerate(batches):
            if i in restarts:
                runner.restart()
            got.extend(runner.run(batch))
            seen.extend(processing_order(batch))
        want, late = stream_join_reference(seen, mode, before, after, grace, joiner)
        assert got == want
        assert runner.late == late
        nulls = sum(
            1
            for _, (side, k, v, _) in numbered
            if v is None or (k is None and not ((side == 0 and mode != "inner") or mode == "outer"))
        )
        assert runner.dropped == late + nulls
    finally:
        close_local_stores()
        mp.undo()


def test_results_do_not_depend_on_the_split(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input in timestamp order, cut anywhere: the same results."""
    data: list[Rec] = [
        (0, "a", "l1", 0),
        (1, "a", "r1", 3),
        (1, "b", "r2", 4),
        (0, "a", "l2", 9),
        (0, "b", "l3", 20),
        (1, "a", "r3", 21),
        (1, "c", "r4", 40),
    ]
    numbered = list(enumerate(data))
    results = set()
    for cut in range(1, len(data)):
        runner = Runner(make_spec("outer", 5, 5, 2), tmp_path_factory.mktemp("split"), monkeypatch)
        got = runner.run(numbered[:cut]) + runner.run(numbered[cut:])
        results.add(tuple(got))
    assert results == {
        (
            ("a", "l1+r1", 3),
            ("b", "None+r2", 4),
            ("a", "l2+None", 9),
            ("b", "l3+None", 20),
            ("a", "None+r3", 21),
        )
    }


def test_left_join_waits_for_the_window_to_close(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No spurious (v, None): the unmatched result comes when stream time passes
    t + after + grace, and not at all when a match arrives within the grace period."""
    runner = Runner(make_spec("left", 10, 10, 5), tmp_path, monkeypatch)
    assert runner.run([(0, (0, "k", "a", 100))]) == []
    # a right record 14 ms later: outside the window, but within the grace period
    assert runner.run([(1, (1, "k", "late-ish", 114))]) == []
    # a match arrives out of order, within window and grace
    assert runner.run([(2, (1, "k", "b", 105))]) == [("k", "a+b", 105)]
    assert runner.run([(3, (0, "other", "c", 116))]) == []
    # stream time 200: "a" was joined; "c" (window end 126 + 5) closes unjoined
    assert runner.run([(4, (0, "other", "d", 200))]) == [("other", "c+None", 116)]
    # a record whose window closed long ago is dropped as late
    assert runner.run([(5, (0, "k", "e", 150))]) == []
    assert runner.late == 1


def test_a_record_stays_joinable_until_no_record_in_time_can_reach_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is kept until stream time passes t + before + after + grace: a right
    record still in time (its own window open) can join a left record whose window has
    closed, as in Kafka Streams, whose window stores retain before + after + grace."""
    runner = Runner(make_spec("inner", 5, 5, 0), tmp_path, monkeypatch)
    assert runner.run([(0, (0, "k", "a", 0))]) == []
    # stream time 10 = 0 + 5 + 5 + 0; "k" is loaded, and "a" must stay
    assert runner.run([(1, (1, "k", "b", 10))]) == []
    assert runner.run([(2, (1, "k", "c", 5))]) == [("k", "a+c", 5)]
    assert runner.run([(3, (0, "z", "d", 16))]) == []  # past 0 + 10: "a" expires
    assert runner.run([(4, (1, "k", "e", 11))]) == []  # in time (11 + 5 = 16), but "a" is gone
    assert runner.late == 0


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 4),
    m=st.integers(1, 4),
    keys=st.dictionaries(st.text(min_size=1, max_size=3), st.integers(-(2**31), 2**31 - 1)),
)
def test_rescale_moves_each_keys_buffers_to_the_task_of_its_hash(
    n: int, m: int, keys: dict[str, int]
) -> None:
    from kspark_server import taskstate

    kind = taskstate.WINDOW_JOIN
    states = [taskstate.empty(kind, False) for _ in range(n)]
    for t, s in enumerate(states):
        s["stream_time"] = 100 + t
    for k, h in keys.items():
        s = states[h % n]
        s["bufs"][k] = {"k": k, "l": [[1, True, "v", "[]", "L", 0, 1, 1, 0]], "r": []}
        s["hash"][k] = h
    blobs = [taskstate.encode_base(kind, False, s) for s in states]
    frame = pd.DataFrame({"blob": blobs, "first": [True] * n, "log": [None] * n})
    parts = pd.concat(list(resplit.split_states(kind, False, m)(iter([frame]))))
    assert int(parts["old_entries"].sum()) == len(keys)
    parts = parts[parts["ks_task"] >= 0]
    found: dict[str, int] = {}
    for _, g in parts.groupby("ks_task"):
        row = resplit.merge_states(kind, False, m)(g)
        st_ = taskstate.materialize(kind, False, row["blob"].tolist(), [])
        task = placement.task_of(int(row["ks_task"].iat[0]))
        assert int(row["entries"].iat[0]) == len(st_["bufs"])
        for k in st_["bufs"]:
            assert st_["hash"][k] % m == task
            found[k] = task
        assert st_["stream_time"] is not None
    assert sorted(found) == sorted(keys)


def test_a_smaller_base_removes_the_old_bases_extra_chunks(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """State format 6: a base of many chunks, then one of fewer: the committed version
    names exactly the new base's chunks (a left-over chunk would put old keys back for
    every reader), and a restart rebuilds the state from them."""
    runner = Runner(
        make_spec("inner", 5, 5, 0, StateOptions(base_chunk_bytes=64)), tmp_path, monkeypatch
    )
    runner.run([(i, (0, f"key-{i}", f"value-{i}", 10)) for i in range(30)])

    def chunks() -> int:
        version = runner.durable.version()
        assert version is not None
        assert len(runner.durable.chunks("join-store")) == version[5]
        return int(version[5])

    assert chunks() > 5
    # stream time 1000: every buffered record's window closes, the state empties
    runner.run([(30, (1, "other", "r", 1000))])
    assert chunks() == 1
    runner.restart()
    assert runner.run([(31, (0, "other", "l", 1001))]) == [("other", "l+r", 1001)]
    assert runner.run([(32, (1, "key-3", "late", 12))]) == []  # its partner expired
