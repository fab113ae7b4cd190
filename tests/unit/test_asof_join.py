"""The versioned-table join's columnar path (``JoinProcessor._process_asof``) against its
record-by-record path, driven directly (no Spark): over random micro-batch splits,
restarts and disordered input, both give the same output rows, the same side rows and
the same durable state after every batch."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.asofharness import Rec, Runner, run_both
from support.taskharness import close_local_stores

from kspark_server import envelope as env
from kspark_server.operators.stream_table_join import JoinProcessor, asof_lookup
from kspark_server.spec import JoinSpec, KeyValue, Packed, PrimSpec, StateOptions

STR = PrimSpec(spark="string")
KV = KeyValue(key=STR, value=STR)


def joiner(v: str, t: str | None) -> str:
    return f"{v}+{t}"


def make_spec(left: bool, retention: int) -> JoinSpec:
    return JoinSpec(
        processor="JOIN",
        store="rates",
        left=left,
        versioned=True,
        history_retention_ms=retention,
        grace_ms=0,
        joiner=joiner,
        joiner_with_key=False,
        stream=KV,
        table=KV,
        output=KV,
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
    )


records = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["a", "b", "c"]) | st.sampled_from([None]),
        st.sampled_from(["x", "y", "z"]) | st.sampled_from([None]),
        st.integers(0, 40),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@example(  # a stream record older than the history retention finds no version
    data=[(1, "k", "x", 0, 0), (1, "k", "y", 35, 0), (0, "k", "a", 2, 0), (0, "k", "b", 30, 0)],
    cuts=[2],
    restarts=[False] * 4,
    left=True,
    retention=10,
    table_times="any",
)
@given(
    data=records,
    cuts=st.lists(st.integers(1, 39), max_size=3, unique=True),
    restarts=st.lists(st.booleans(), min_size=4, max_size=4),
    left=st.booleans(),
    retention=st.integers(0, 15),
    table_times=st.sampled_from(["any", "rising", "rising-per-batch"]),
)
def test_the_columnar_join_matches_the_record_by_record_join(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    left: bool,
    retention: int,
    table_times: str,
) -> None:
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    if table_times != "any":  # the columnar path runs where the table's times rise
        parts = [(0, len(data))] if table_times == "rising" else itertools.pairwise(bounds)
        for a, b in parts:
            part = data[a:b]
            times = iter(sorted(r[3] for r in part if r[0] == 1))
            data[a:b] = [(s, k, v, next(times) if s else t, p) for s, k, v, t, p in part]
    # every logged change is checked against the state it stands for
    spec = dataclasses.replace(make_spec(left, retention), state=StateOptions(check_log=True))
    run_both(tmp_path_factory.mktemp("asof"), data, cuts, restarts, spec)


def test_asof_lookup_takes_the_newest_version_put_before_the_record() -> None:
    import numpy as np

    i64 = lambda xs: np.asarray(xs, dtype="int64")  # noqa: E731
    # key 0: loaded versions at 10 ("L10") and 30 ("L30"); the batch puts 20 ("B20") at
    # position 2 and 30 ("B30") at position 5
    found = asof_lookup(
        i64([0, 0]),
        i64([2, 5]),
        i64([20, 30]),
        ["B20", "B30"],
        [(0, [[10, 30], ["L10", "L30"]])],
        i64([0, 0, 0, 0, 1]),
        i64([1, 3, 4, 6, 7]),
        i64([25, 25, 35, 35, 35]),
    )
    assert found == ["L10", "B20", "L30", "B30", None]


def test_a_batch_puts_versions_older_than_the_loaded_ones(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(True, 30)
    fast, slow = (
        Runner(spec, True, tmp_path, monkeypatch),
        Runner(spec, False, tmp_path, monkeypatch),
    )
    try:
        first = [(0, (1, "a", "x", 30, 0))]
        # the version at 10 goes before the loaded one at 30; the record at 20 sees it
        second = [(1, (1, "a", "y", 10, 0)), (2, (0, "a", "p", 20, 0))]
        for batch in (first, second):
            assert fast.run(batch) == slow.run(batch)
        assert fast.state()["table"]["data"] == {"a": ([10, 30], ["y", "x"])}
        assert fast.state() == slow.state()
    finally:
        close_local_stores()


def test_the_join_operator_pickles_by_value() -> None:
    """The client ships kspark_server by value (cloudpickle): everything the operator's
    classes hold must pickle (a functools.cached_property, with its lock, does not)."""
    import pickle

    from pyspark import cloudpickle

    import kspark_server

    cloudpickle.register_pickle_by_value(kspark_server)
    try:
        proc = pickle.loads(cloudpickle.dumps(JoinProcessor(make_spec(True, 10))))
    finally:
        cloudpickle.unregister_pickle_by_value(kspark_server)
    assert type(proc).__name__ == "JoinProcessor"
