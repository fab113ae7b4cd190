"""Column-at-a-time decoding of JSON-packed dataclass values
(:mod:`kspark_server.textdecode`) against the record decoder, text by text; and the
versioned-table join that uses it against the record-by-record join, driven directly
(no Spark): over random micro-batch splits, restarts, equal and extreme timestamps,
nulls, values that do not decode and a joiner that raises, both give the same output
rows, the same side rows and the same durable state after every batch."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import msgspec
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.taskharness import TaskState, close_local_stores

from kspark_server import codec, placement, taskstate
from kspark_server import envelope as env
from kspark_server.handlers import LogAndContinueProcessingExceptionHandler
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.spec import (
    Handling,
    JoinSpec,
    KeyValue,
    ListSpec,
    Packed,
    PrimSpec,
    RecordSpec,
    StateOptions,
)
from kspark_server.textdecode import texts_decoder

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


def one_by_one(spec: RecordSpec, texts: list[str]) -> list[Any] | None:
    """What the record path makes of each text; None if any text does not decode."""
    dec = codec.decoder(spec, plain=True)
    out = []
    for t in texts:
        try:
            out.append(dec(msgspec.json.decode(t)))
        except Exception:
            return None
    return out


def shown(values: list[Any]) -> list[str]:
    # repr tells 1 from 1.0 and True, and -0.0 from 0.0
    return [repr(v) for v in values]


def loose(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's JSON value: mostly of its type, sometimes of another."""
    other = st.one_of(
        st.text(max_size=3),
        st.integers(),
        st.floats(),
        st.booleans(),
        st.none(),
        st.sampled_from([10**400, 2**64, -(2**63) - 1, [1], {"a": 1}]),
    )
    return st.one_of(good, good, good, other)


INT64 = st.integers(-(2**63), 2**63 - 1)
pay_objects = st.tuples(
    st.fixed_dictionaries(
        {
            "id": loose(st.text()),
            "amount": loose(st.floats(allow_nan=False, allow_infinity=False) | INT64),
            "n": loose(INT64),
            "ok": loose(st.booleans()),
        },
        optional={"extra": st.integers()},
    ),
    st.sets(st.sampled_from(["id", "amount", "n", "ok"]), max_size=1),
    st.booleans(),
).map(lambda t: json.dumps({k: v for k, v in t[0].items() if k not in t[1]}, ensure_ascii=t[2]))

RAW = [
    "null",
    "",
    " ",
    "{}",
    "[]",
    "1",
    '"x"',
    "NaN",
    '{"id":"a","amount":1e400,"n":1,"ok":true}',
    '{"id":"a","amount":1,"n":1.0,"ok":true}',
    '{"id":"a","amount":true,"n":1,"ok":true}',
    '{"id":"a","amount":1,"n":1,"ok":1}',
    '{"id":"a","id":"b","amount":1,"n":1,"ok":true}',
    '{"id":"a","amount":1,"n":1,"ok":true}\n{"id":"b","amount":2,"n":2,"ok":false}',
    '{"id":"a","amount":1,"n":1,"ok":true},{"id":"b","amount":2,"n":2,"ok":false}',
    '{"id":"a","amount":1,"n":1,"ok":true',
    '"ok":true}',
    '{"id":"\\ud800","amount":1,"n":1,"ok":true}',
    '{"id":"\ud800","amount":1,"n":1,"ok":true}',
    '{"id":"a","amount":1e308,"n":9223372036854775808,"ok":true}',
    '{"id":"a","amount":100000000000000000000000000000001,"n":-1,"ok":false}',
]


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@example(texts=['{"id":"a","amount":1,"n":1,"ok":true},{"id":"b"', '"amount":2,"n":2,"ok":false}'])
@example(texts=['{"id":"a","amount":1,"n":1,"ok":true}', ""])
@given(texts=st.lists(pay_objects | st.sampled_from(RAW), max_size=8))
def test_a_column_decodes_to_the_records_the_record_decoder_gives(texts: list[str]) -> None:
    expected = one_by_one(PAY, texts)
    decode = texts_decoder(PAY)
    assert decode is not None
    got = decode(texts)
    if expected is None:
        assert got is None
    elif got is not None:
        assert shown(got) == shown(expected)


def test_a_column_of_well_formed_texts_decodes_in_one_call() -> None:
    texts = [
        json.dumps({"id": "a", "amount": 1, "n": 2**63 - 1, "ok": True}),
        "null",
        json.dumps({"id": "é", "amount": -0.0, "n": -(2**63), "ok": False, "more": [1]}),
        json.dumps({"amount": 1e308, "ok": True, "n": 0, "id": ""}, ensure_ascii=False),
    ]
    decode = texts_decoder(PAY)
    assert decode is not None
    got = decode(texts)
    assert got is not None
    assert shown(got) == shown(one_by_one(PAY, texts) or [])
    assert type(got[0].amount) is float


@dataclasses.dataclass
class WithDefault:
    id: str
    n: int = 0


@dataclasses.dataclass
class WithPostInit:
    id: str

    def __post_init__(self) -> None:
        self.id = self.id.upper()


@dataclasses.dataclass(init=False)
class OwnInit:
    id: str

    def __init__(self, id: str) -> None:
        self.id = id.upper()


@dataclasses.dataclass
class Listed:
    ids: list[str]


@dataclasses.dataclass
class Setter:
    id: str

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, str(value).upper())


@pytest.mark.parametrize(
    "spec",
    [
        RecordSpec(cls=WithDefault, fields=(("id", STR), ("n", LONG))),
        RecordSpec(cls=WithPostInit, fields=(("id", STR),)),
        RecordSpec(cls=OwnInit, fields=(("id", STR),)),
        RecordSpec(cls=Setter, fields=(("id", STR),)),
        RecordSpec(cls=Listed, fields=(("ids", ListSpec(element=STR)),)),
        RecordSpec(cls=Pay, fields=(("id", STR), ("amount", LONG), ("n", LONG), ("ok", BOOL))),
        STR,
    ],
)
def test_records_that_msgspec_would_build_otherwise_take_the_record_path(spec: Any) -> None:
    assert texts_decoder(spec) is None


# -- the join ---------------------------------------------------------------------------


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
    """One task of the join across batches, in ``mode``: "fast" (as it runs), "text" (no
    value decoded a column at a time) or "records" (that, and a versioned table's
    record-by-record path)."""

    def __init__(self, spec: JoinSpec, mode: str, tmp: Any, mp: pytest.MonkeyPatch) -> None:
        self.spec, self.mode, self.tmp, self.mp = spec, mode, tmp, mp
        self.durable = TaskState(tmp / f"checkpoint-{mode}")
        self.executors = itertools.count()
        #: batches whose stream values, and table values, were decoded a column at a time
        self.decoded_columns = self.decoded_tables = 0
        self.restart()

    def restart(self) -> None:
        self.mp.setenv(
            "KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"{self.mode}-{next(self.executors)}")
        )
        self.proc = JoinProcessor(self.spec)
        if self.mode == "records":
            self.proc._process_asof = lambda *a: False  # type: ignore[method-assign]
        if self.mode in ("records", "text"):
            self.proc.bulk = (None, None)
        else:
            decode_values, decode_tables = self.proc._decode_values, self.proc._decode_tables

            def values(cells: list[Any]) -> Any:
                got = decode_values(cells)
                self.decoded_columns += got is not None
                return got

            def tables(cells: list[Any]) -> Any:
                got = decode_tables(cells)
                self.decoded_tables += got is not None
                return got

            self.proc._decode_values = values  # type: ignore[method-assign]
            self.proc._decode_tables = tables  # type: ignore[method-assign]

    def run(self, batch: list[tuple[int, Rec]]) -> list[dict[str, Any]]:
        key = (placement.task_keys(1)[0],)
        table = self.durable.run(self.proc, key, frame(batch))
        return [] if table is None else table.to_pylist()

    def state(self) -> Any:
        log = self.durable.log("rates")
        return taskstate.materialize("join", self.spec.versioned, self.durable.chunks("rates"), log)


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
    tmp: Any,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    spec: JoinSpec,
    other: str = "records",
) -> int:
    """The join as it runs and in mode ``other`` (:class:`Runner`) over ``data`` cut into
    batches; the batches in which the first decoded the stream values a column at a time,
    plus 100 times those in which it decoded the table values so."""
    tmp.mkdir(parents=True, exist_ok=True)
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    numbered = list(enumerate(data))
    batches = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = Runner(spec, "fast", tmp, mp), Runner(spec, other, tmp, mp)
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
    return fast.decoded_columns + 100 * fast.decoded_tables


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
def test_the_join_decoding_columns_matches_the_record_by_record_join(
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
    run_both(tmp_path_factory.mktemp("decode"), data, cuts, restarts, spec)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=records,
    cuts=st.lists(st.integers(1, 39), max_size=3, unique=True),
    restarts=st.lists(st.booleans(), min_size=4, max_size=4),
    left=st.booleans(),
    table=st.sampled_from(["latest", "grace"]),
)
def test_the_record_loop_decoding_columns_matches_it_decoding_each_record(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    left: bool,
    table: str,
) -> None:
    # a latest-value table, and a versioned one with grace, join record by record
    spec = make_spec(left, 20, versioned=table == "grace", grace=5 if table == "grace" else 0)
    run_both(tmp_path_factory.mktemp("loop"), data, cuts, restarts, spec, other="text")


def test_a_batch_of_well_formed_values_is_decoded_a_column_at_a_time(tmp_path: Any) -> None:
    data: list[Rec] = [
        (1, "a", "good", 5, 0),
        (0, "a", "good", 5, 1),  # the update at the same time comes first
        (0, "a", "good", 4, 0),  # before any version: no rate
        (1, "b", None, 6, 0),  # a tombstone
        (0, "b", "good", 7, 0),
        (0, "a", "raises", 9, 1),
        (0, None, "good", 9, 1),
        (0, "c", None, 9, 0),
    ]
    for left in (True, False):
        decoded = run_both(tmp_path / str(left), data, [4], [True], make_spec(left, 100))
        assert decoded == 202
        # the record loop (a latest-value table) decodes its values the same way
        latest = make_spec(left, 100, versioned=False)
        assert run_both(tmp_path / f"latest-{left}", data, [4], [True], latest, "text") == 2
    # a value that does not decode sends the batch record by record, and to the handler
    bad = [*data, (0, "a", "bad", 9, 0)]
    assert run_both(tmp_path / "bad", bad, [], [], make_spec(True, 100)) == 0
