"""The versioned-table join's columnar path against its record-by-record path, with
JSON-packed dataclass values (as the lowering packs them), driven directly (no Spark):
over random micro-batch splits, restarts, equal and extreme timestamps, nulls, values
that do not decode and a joiner that raises (handled), both give the same output rows,
the same side rows and the same durable state after every batch."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.asofharness import Rec, run_both

from kspark_server import envelope as env
from kspark_server.handlers import LogAndContinueProcessingExceptionHandler
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


#: the records' values: a stream value is "good", "raises" (the joiner raises), "bad" (does
#: not decode) or None; a table's "good" or None
def value_text(side: int, kind: str | None, seq: int) -> str | None:
    if kind is None:
        return None
    if side:
        return json.dumps({"rate": 1 + seq / 8, "since": seq})
    if kind == "bad":
        return json.dumps({"id": f"p{seq}", "amount": seq})
    n = 13 if kind == "raises" else seq
    return json.dumps({"id": f"p{seq}", "amount": seq * 1.5, "n": n, "ok": seq % 2 == 0})


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
    spec = make_spec(left, retention)
    run_both(tmp_path_factory.mktemp("packed"), data, cuts, restarts, spec, value_text)


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
        spec = make_spec(left, 100)
        assert run_both(tmp_path / str(left), data, [4], [True], spec, value_text) == 2
