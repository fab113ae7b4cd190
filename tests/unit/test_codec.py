"""The codec: Python records to Spark rows and back, through Arrow (no Spark server).

Generated dataclasses and attrs classes (nested, optional, lists, dicts, Decimal,
datetime, private, aliased and ``init=False`` fields) are encoded as the operators encode
them, go through an Arrow table of the Spark schema that kspark declares for them, and are
decoded as the operators decode them: they must come back equal.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import itertools
import json
import typing
from typing import Any

import attrs
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from kspark.errors import TypeMappingError
from kspark.plan.types import TypeDesc, describe_type
from kspark_server import codec, columns
from kspark_server.spec import JsonSpec

_names = itertools.count()

#: the records a class was generated with: (attribute, type, __init__ argument or None)
_FIELDS: dict[type, list[tuple[str, Any, str | None]]] = {}

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)

_LEAVES: dict[Any, st.SearchStrategy[Any]] = {
    str: _text,
    int: st.integers(-(2**63), 2**63 - 1),
    float: st.floats(allow_nan=False),
    bool: st.booleans(),
    bytes: st.binary(max_size=8),
    # Spark timestamps are instants; Arrow gives them back in UTC
    datetime.datetime: st.datetimes(timezones=st.just(datetime.UTC)),
    # decimal(38,18): 20 digits before the point, 18 after
    decimal.Decimal: st.decimals(
        min_value=-(10**19), max_value=10**19, places=18, allow_nan=False, allow_infinity=False
    ),
}


def _types(depth: int) -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(list(_LEAVES))
    if depth == 0:
        return leaf
    inner = _types(depth - 1)
    return st.one_of(
        leaf,
        inner.map(lambda t: list[t]),  # type: ignore[valid-type]
        inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
        inner.map(lambda t: t | None),
        _record_classes(depth - 1),
    )


@st.composite
def _record_classes(draw: st.DrawFn, depth: int) -> type:
    """A dataclass or attrs class with 1 to 4 fields of generated types."""
    flavour = draw(st.sampled_from(["dataclass", "frozen dataclass", "attrs", "frozen attrs"]))
    is_attrs = flavour.endswith("attrs")
    fields = []
    for i in range(draw(st.integers(1, 4))):
        name = f"_f{i}" if draw(st.booleans()) else f"f{i}"
        alias = f"a{i}" if is_attrs and draw(st.booleans()) else None
        init = draw(st.sampled_from([True, True, True, False]))
        fields.append((name, draw(_types(depth)), alias, init))
    # fields left out of __init__ last: they have a default, and arguments without one
    # cannot follow it
    fields.sort(key=lambda f: not f[3])
    cls_name = f"R{next(_names)}"
    args: list[str | None]
    if is_attrs:
        ns: dict[str, Any] = {"__annotations__": {}}
        for name, tp, alias, init in fields:
            ns["__annotations__"][name] = tp
            ns[name] = attrs.field(alias=alias) if init else attrs.field(init=False, default=None)
        cls = attrs.define(type(cls_name, (), ns), frozen=flavour == "frozen attrs")
        args = [(alias or name.lstrip("_")) if init else None for name, _, alias, init in fields]
    else:
        cls = dataclasses.make_dataclass(
            cls_name,
            [
                (name, tp) if init else (name, tp, dataclasses.field(init=False, default=None))
                for name, tp, _, init in fields
            ],
            frozen=flavour == "frozen dataclass",
        )
        args = [name if init else None for name, _, _, init in fields]
    _FIELDS[cls] = [(f[0], f[1], arg) for f, arg in zip(fields, args, strict=True)]
    return cls


def _values(tp: Any) -> st.SearchStrategy[Any]:
    if tp in _LEAVES:
        return _LEAVES[tp]
    if tp in _FIELDS:
        fields = _FIELDS[tp]

        def build(values: tuple[Any, ...]) -> Any:
            obj = tp(**{arg: v for (_, _, arg), v in zip(fields, values, strict=True) if arg})
            for (name, _, arg), v in zip(fields, values, strict=True):
                if arg is None:
                    object.__setattr__(obj, name, v)
            return obj

        return st.tuples(*[_values(t) for _, t, _ in fields]).map(build)
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return st.lists(_values(targs[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_text, _values(targs[1]), max_size=3)
    (inner,) = [a for a in targs if a is not type(None)]  # T | None
    return st.none() | _values(inner)


def _through_arrow(desc: TypeDesc, values: list[Any]) -> list[Any]:
    """Encode ``values``, write them to an Arrow batch of their Spark type, read them back
    and decode them: what a record meets between two operators."""
    dec = codec.decoder(desc.spec())
    return [dec(row["v"]) for row in _arrow_rows(desc, values)]


def _arrow_rows(desc: TypeDesc, values: list[Any]) -> list[dict[str, Any]]:
    """``values`` encoded, as the rows of an Arrow batch of their Spark type."""
    fields = [{"name": "v", "type": desc.spark_json(), "nullable": True, "metadata": {}}]
    # Spark's Python workers get timestamps as UTC instants
    schema = to_arrow_schema(
        StructType.fromJson({"type": "struct", "fields": fields}), timezone="UTC"
    )
    enc = codec.encoder(desc.spec())
    batch = pa.RecordBatch.from_pylist([{"v": enc(v)} for v in values], schema=schema)
    rows: list[dict[str, Any]] = batch.to_pylist()
    return rows


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_records_come_back_equal_through_arrow(data: st.DataObject) -> None:
    cls = data.draw(_record_classes(2), label="class")
    values = data.draw(st.lists(_values(cls), min_size=1, max_size=3), label="values")
    assert _through_arrow(describe_type(cls), values) == values


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_the_plain_decoder_gives_the_same_records(data: st.DataObject) -> None:
    """``decoder(plain=True)``, for cells that are plain Python already (Arrow's
    ``to_pylist``), builds the records the general decoder builds."""
    cls = data.draw(_record_classes(2), label="class")
    values = data.draw(st.lists(_values(cls), min_size=1, max_size=3), label="values")
    desc = describe_type(cls)
    cells = [row["v"] for row in _arrow_rows(desc, values)]
    fast, general = codec.decoder(desc.spec(), plain=True), codec.decoder(desc.spec())
    assert [fast(c) for c in cells] == [general(c) for c in cells] == values


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_whole_columns_convert_as_values_do(data: st.DataObject) -> None:
    """The chain's column codec gives the per-value codec's objects and Arrow values."""
    cls = data.draw(_record_classes(2), label="class")
    values = data.draw(st.lists(_values(cls) | st.none(), max_size=4), label="values")
    spec = describe_type(cls).spec()
    fields = [{"name": "v", "type": describe_type(cls).spark_json(), "nullable": True}]
    schema = to_arrow_schema(
        StructType.fromJson({"type": "struct", "fields": fields}), timezone="UTC"
    )
    per_value = pa.array([codec.encoder(spec)(v) for v in values], schema.field(0).type)
    by_column = columns.column_encoder(spec)(values, schema.field(0).type)
    # None: the chain encodes that column value by value instead
    assert by_column is None or by_column.equals(per_value)
    decode = codec.decoder(spec)
    assert columns.column_decoder(spec)(per_value) == [decode(x) for x in per_value.to_pylist()]


@attrs.frozen
class Account:
    _id: str
    owner: str = attrs.field(alias="holder")
    balance: float = attrs.field(init=False, default=0.0)


@dataclasses.dataclass(frozen=True)
class Invoice:
    number: int
    account: Account
    total: decimal.Decimal = dataclasses.field(init=False, default=decimal.Decimal(0))


def test_private_aliased_and_non_init_fields_decode() -> None:
    account = Account("a-1", holder="Ann")
    object.__setattr__(account, "balance", 12.5)
    invoice = Invoice(7, account)
    object.__setattr__(invoice, "total", decimal.Decimal("99.5"))
    (back,) = _through_arrow(describe_type(Invoice), [invoice])
    assert back == invoice and back.account.balance == 12.5


@dataclasses.dataclass
class WithInitVar:
    amount: float
    scale: dataclasses.InitVar[int]

    def __post_init__(self, scale: int) -> None:
        self.amount *= scale


@attrs.define(init=False)
class OwnInit:
    amount: float

    def __init__(self, cents: int) -> None:
        self.amount = cents / 100


@pytest.mark.parametrize(
    ("cls", "field"), [(WithInitVar, "scale"), (OwnInit, "amount")], ids=["initvar", "own-init"]
)
def test_a_class_the_decoder_cannot_rebuild_is_refused_when_described(
    cls: type, field: str
) -> None:
    with pytest.raises(TypeMappingError, match=rf"{cls.__qualname__}\.{field}") as e:
        describe_type(cls)
    assert e.value.params == {"type": cls.__qualname__, "field": field}


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON_VALUES, ascii_only=st.booleans())
def test_dynamic_values_read_as_json_loads_reads_them(value: Any, ascii_only: bool) -> None:
    """The fast JSON reader (msgspec) gives what ``json.loads`` gives, for every text
    (NaN, infinities, big integers and lone surrogates included, which it leaves to
    ``json.loads``)."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert repr(codec.decode_json_texts([text])) == repr([json.loads(text)])
    assert repr(columns.column_decoder(JsonSpec())(pa.array([text]))) == repr([json.loads(text)])


@pytest.mark.parametrize("text", ["1e400", "-1e400", '"\\ud800"', "12345678901234567890123", "x y"])
def test_texts_the_fast_json_reader_refuses_read_as_before(text: str) -> None:
    try:
        want = json.loads(text)
    except ValueError:
        want = text  # not JSON: Spark handed a JSON string over without its quotes
    assert repr(codec.decode_json_texts([text, None])) == repr([want, None])
    assert repr(codec.decoder(JsonSpec())(text)) == repr(want)


@dataclasses.dataclass
class _Clashing:
    """A record whose argument names are the record decoder's own names."""

    x: str
    obj: float
    cls: int
    n0: list[int]
    d0: dict[str, float]
    setattr: bool
    later: int = dataclasses.field(init=False, default=0)


@pytest.mark.parametrize("plain", [True, False])
def test_a_record_decoder_takes_any_argument_names(plain: bool) -> None:
    """The record decoder written out per class (one keyword argument per field) keeps
    each argument to its field, whatever the names, sets the fields ``__init__`` does
    not take, and keeps a float field a float when JSON gave an integer."""
    dec = codec.decoder(describe_type(_Clashing).spec(), plain=plain)
    got = dec(
        {"x": "a", "obj": 2, "cls": 3, "n0": [1, 2], "d0": {"k": 1}, "setattr": True, "later": 7}
    )
    want = _Clashing("a", 2.0, 3, [1, 2], {"k": 1.0}, True)
    want.later = 7
    assert got == want and type(got.obj) is float and type(got.d0["k"]) is float
    assert dec(None) is None
