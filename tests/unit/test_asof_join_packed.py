"""The versioned-table join's columnar path against its record-by-record path, with
JSON-packed dataclass values (as the lowering packs them), driven directly (no Spark):
over random micro-batch splits, restarts, equal and extreme timestamps, nulls, values
that do not decode and a joiner that raises (handled), both give the same output rows,
the same side rows and the same durable state after every batch."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.taskharness import TaskState, close_local_stores

from kspark_server import envelope as env
from kspark_server import placement, taskstate
from kspark_server.handlers import LogAndContinueProcessingExceptionHandler
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.spec import (
    Handling,
    JoinSpec,
    KeyValue,
    Packed,
    PrimSpec,
    RecordSpec,
    StateOptions,
)

STR, LONG, DOUBLE, BOOL = (PrimSpec(spark=s) for s in ("string", "long", "double", "boolean"))


@dataclasses.dataclass
class Pay:
    id: str
    amount: float
    n: int
    ok: bool


@dataclasses.dataclass(frozen=True)
class Rate:
    rate: float
    since: int


PAY = RecordSpec(cls=Pay, fields=(("id", STR), ("amount", DOUBLE), ("n", LONG), ("ok", BOOL)))
RATE = RecordSpec(cls=Rate, fields=(("rate", DOUBLE), ("since", LONG)))


def convert(p: Pay, r: Rate | None) -> float:
    if p.n == 13:
        raise ValueError("unlucky payment")
    return p.amount if r is None else p.amount * r.rate + r.since


def make_spec(left: bool, retention: int, versioned: bool = True, grace: int = 0) -> JoinSpec:
    return JoinSpec(
        processor="JOIN",
        store="rates",
        left=left,
        versioned=versioned,
        history_retention_ms=retention,
        grace_ms=grace,
        joiner=convert,
        joiner_with_key=False,
        stream=KeyValue(key=STR, value=PAY),
        table=KeyValue(key=STR, value=RATE),
        output=KeyValue(key=STR, value=DOUBLE),
        output_schema=env.envelope_json("string", "double"),
        packed=Packed(value=True, tvalue=True),
        handling=Handling(
            processing=LogAndContinueProcessingExceptionHandler(), deserialization="continue"
        ),
        # every logged change is checked against the state it stands for
        state=StateOptions(check_log=True),
    )


#: (table?, key, value kind, timestamp, partition): a stream value kind is "good",
#: "raises" (the joiner raises), "bad" (does not decode) or None; a table's "good" or None
Rec = tuple[int, str | None, str | None, int, int]


def value_text(side: int, kind: str | None, seq: int) -> str | None:
    if kind is None:
        return None
    if side:
        return json.dumps({"rate": 1 + seq / 8, "since": seq})
    if kind == "bad":
        return json.dumps({"id": f"p{seq}", "amount": seq})
    n = 13 if kind == "raises" else seq
    return json.dumps({"id": f"p{seq}", "amount": seq * 1.5, "n": n, "ok": seq % 2 == 0})


def frame(batch: list[tuple[int, Rec]]) -> pd.DataFrame:
    rows = []
    for seq, (side, key, kind, ts, part) in batch:
        text = value_text(side, kind, seq)
        rows.append(
            {
                "key": key,
                "value": None if side else text,
                "timestamp": ts,
                "headers": [],
                "topic": "rates" if side else "payments",
                "partition": part,
                "offset": seq,
                "ks_seq": seq,
                "ks_sub": 0,
                "ks_side": None,
                "ks_tvalue": text if side else None,
                "ks_jside": side,
                "ks_hash": 7 if key is None else ord(key[0]),
                "ks_task": 0,
            }
        )
    return pd.DataFrame(rows)


class Runner:
    """One task of the join across batches: columnar where it can be, or record by record
    (``columnar`` False)."""

    def __init__(self, spec: JoinSpec, columnar: bool, tmp: Any, mp: pytest.MonkeyPatch) -> None:
        self.spec, self.columnar, self.tmp, self.mp = spec, columnar, tmp, mp
        self.durable = TaskState(tmp / f"checkpoint-{columnar}")
        self.executors = itertools.count()
        #: batches the columnar path took
        self.columnar_batches = 0
        self.restart()

    def restart(self) -> None:
        self.mp.setenv(
            "KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"{self.columnar}-{next(self.executors)}")
        )
        self.proc = JoinProcessor(self.spec)
        if not self.columnar:
            self.proc._process_asof = lambda *a: False  # type: ignore[method-assign]
            return
        asof = self.proc._process_asof

        def counted(*args: Any) -> bool:
            took = asof(*args)
            self.columnar_batches += took
            return took

        self.proc._process_asof = counted  # type: ignore[method-assign]

    def run(self, batch: list[tuple[int, Rec]]) -> list[dict[str, Any]]:
        key = (placement.task_keys(1)[0],)
        table = self.durable.run(self.proc, key, frame(batch))
        return [] if table is None else table.to_pylist()

    def state(self) -> Any:
        log = self.durable.log("rates")
        return taskstate.materialize("join", True, self.durable.chunks("rates"), log)


EXTREME = [0, 1, 2**62, 2**63 - 1]
records = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["a", "b", "c"]) | st.sampled_from([None]),
        st.sampled_from(["good", "good", "good", "raises", "bad"]) | st.sampled_from([None]),
        st.integers(0, 40) | st.sampled_from(EXTREME),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=40,
)


def run_both(
    tmp: Any, data: list[Rec], cuts: list[int], restarts: list[bool], spec: JoinSpec
) -> int:
    """Both joins over ``data`` cut into batches; the batches the columnar path took."""
    tmp.mkdir(parents=True, exist_ok=True)
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    numbered = list(enumerate(data))
    batches = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = Runner(spec, True, tmp, mp), Runner(spec, False, tmp, mp)
        try:
            for batch, restart in zip(batches, [*restarts, *[False] * len(batches)], strict=False):
                assert fast.run(batch) == slow.run(batch)
                assert fast.state() == slow.state()
                if restart:
                    close_local_stores()
                    fast.restart()
                    slow.restart()
        finally:
            close_local_stores()
    return fast.columnar_batches


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@example(  # equal timestamps: the table update first, at the largest timestamp
    data=[
        (1, "a", "good", 2**63 - 1, 0),
        (0, "a", "good", 2**63 - 1, 0),
        (1, "a", "good", 2**63 - 1, 1),
        (0, "a", "good", 2**63 - 1, 1),
    ],
    cuts=[],
    restarts=[False] * 4,
    left=False,
    retention=0,
    sorted_table=True,
)
@given(
    data=records,
    cuts=st.lists(st.integers(1, 39), max_size=3, unique=True),
    restarts=st.lists(st.booleans(), min_size=4, max_size=4),
    left=st.booleans(),
    retention=st.integers(0, 15) | st.sampled_from([2**62]),
    sorted_table=st.booleans(),
)
def test_the_columnar_join_of_packed_records_matches_the_record_by_record_join(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    left: bool,
    retention: int,
    sorted_table: bool,
) -> None:
    if sorted_table:  # the columnar path runs where the table's times rise
        times = iter(sorted(r[3] for r in data if r[0] == 1))
        data = [(s, k, v, next(times) if s else t, p) for s, k, v, t, p in data]
    run_both(tmp_path_factory.mktemp("packed"), data, cuts, restarts, make_spec(left, retention))


def test_the_columnar_join_hands_records_that_fail_to_the_handler(tmp_path: Any) -> None:
    data: list[Rec] = [
        (1, "a", "good", 5, 0),
        (0, "a", "good", 5, 1),  # the update at the same time comes first
        (0, "a", "good", 4, 0),  # before any version: no rate
        (1, "b", None, 6, 0),  # a tombstone
        (0, "b", "good", 7, 0),
        (0, "a", "raises", 9, 1),  # the joiner raises
        (0, "a", "bad", 9, 0),  # the value does not decode
        (0, None, "good", 9, 1),
        (0, "c", None, 9, 0),
        (1, "c", "good", 2**63 - 1, 0),
        (0, "c", "good", 2**63 - 1, 1),
    ]
    for left in (True, False):
        assert run_both(tmp_path / str(left), data, [4], [True], make_spec(left, 100)) == 2
