"""Whole Arrow columns to Python objects and back, for the fused stateless chain.

The per-value codec (:mod:`kspark_server.codec`) turns one cell at a time; these functions
turn a column at once and give the same objects and the same Arrow values:

- :func:`column_decoder` converts a struct column field by field (each child with one
  ``to_pylist``) and builds the records with one ``__init__`` call each, positionally
  where the class allows it, instead of one dict per row;
- :func:`column_encoder` checks a column's Python types once (the set of the values'
  exact types) and lets ``pyarrow.array`` convert it; it returns None when a value is
  not of an exact type the per-value encoder accepts as is, or when Arrow refuses the
  column, and the caller then encodes record by record, so that a wrong value still
  fails alone, with the per-value encoder's message.

Examples
--------
>>> import dataclasses
>>> import pyarrow as pa
>>> from kspark_server.spec import PrimSpec, RecordSpec
>>> @dataclasses.dataclass
... class Point:
...     x: int
...     y: int
>>> spec = RecordSpec(cls=Point, fields=(("x", PrimSpec(spark="long")), ("y", PrimSpec(spark="long"))))
>>> col = pa.array([{"x": 1, "y": 2}, None])
>>> column_decoder(spec)(col)
[Point(x=1, y=2), None]
>>> column_encoder(spec)([Point(3, 4)], col.type).to_pylist()
[{'x': 3, 'y': 4}]
>>> column_encoder(PrimSpec(spark="long"))([True], pa.int64()) is None  # a bool is no long
True
"""

from __future__ import annotations

import datetime
import decimal
import inspect
import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kspark_server import codec
from kspark_server.spec import JsonSpec, PrimSpec, RecordSpec, TypeSpec

__all__ = ["ColumnDecoder", "ColumnEncoder", "column_decoder", "column_encoder", "mapped"]

#: A column to its Python values.
ColumnDecoder = Callable[[pa.Array], list[Any]]
#: Python values to a column of the given Arrow type, or None to encode value by value.
ColumnEncoder = Callable[[list[Any], pa.DataType], "pa.Array | None"]

_NONE = type(None)

#: The exact Python types that the per-value encoder passes through unchanged for each
#: Spark type; any other type (an int for a double, a bool for a long, a subclass) goes
#: through the per-value encoder, which converts or refuses it.
_EXACT: dict[str, frozenset[type]] = {
    "string": frozenset({str, _NONE}),
    "long": frozenset({int, _NONE}),
    "double": frozenset({float, _NONE}),
    "boolean": frozenset({bool, _NONE}),
    "binary": frozenset({bytes, _NONE}),
    "timestamp": frozenset({datetime.datetime, _NONE}),
}
_DECIMAL = frozenset({decimal.Decimal, _NONE})


def column_decoder(t: TypeSpec) -> ColumnDecoder:
    """A function from an Arrow column to the Python values of type spec ``t``, equal to
    ``[codec.decoder(t)(x) for x in column.to_pylist()]``."""
    if isinstance(t, PrimSpec):
        # Arrow gives Python's own primitives: nothing to convert
        return _to_pylist
    if isinstance(t, RecordSpec):
        return _record_decoder(t)
    if isinstance(t, JsonSpec):
        return _json_texts
    dec = codec.decoder(t)
    return lambda col: list(map(dec, col.to_pylist()))


def _json_texts(col: pa.Array) -> list[Any]:
    return codec.decode_json_texts(col.to_pylist())


def _to_pylist(col: pa.Array) -> list[Any]:
    return col.to_pylist()  # type: ignore[no-any-return]


def _record_decoder(t: RecordSpec) -> ColumnDecoder:
    cls = t.cls
    init = codec.init_args(cls)
    fields = [name for name, _ in t.fields]
    decs = {name: column_decoder(ft) for name, ft in t.fields}
    by_arg: dict[str, str] = {arg: name for name in fields if (arg := init[name]) is not None}
    after = [name for name in fields if init[name] is None]
    # the class's positional parameters, if the fields' arguments are the first of them:
    # then one ``map(cls, *columns)`` builds the records without a dict per record
    params = list(inspect.signature(cls).parameters.values())
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    head = positional[: len(by_arg)]
    order = [by_arg[a] for a in head] if set(head) == set(by_arg) else None
    args = list(by_arg)

    def build(col: pa.StructArray) -> list[Any]:
        children = {name: col.field(name) for name in fields}
        values = {name: decs[name](children[name]) for name in fields}
        if not by_arg:  # every field is set after __init__
            objs = [cls() for _ in range(len(col))]
        elif order is not None:
            objs = list(map(cls, *(values[name] for name in order)))
        else:
            names = [by_arg[a] for a in args]
            objs = [
                cls(**dict(zip(args, row, strict=True)))
                for row in zip(*(values[n] for n in names), strict=True)
            ]
        for name in after:
            # frozen and slotted classes too: the value is the one that was encoded
            for obj, v in zip(objs, values[name], strict=True):
                object.__setattr__(obj, name, v)
        return objs

    def dec_records(col: pa.Array) -> list[Any]:
        if not col.null_count:
            return build(col)
        # a null record is None, and its fields must not reach __init__ (a validator
        # would refuse them)
        valid = col.is_valid()
        objs = iter(build(col.filter(valid)))
        return [next(objs) if ok else None for ok in valid.to_pylist()]

    return dec_records


def column_encoder(t: TypeSpec, what: str = "value") -> ColumnEncoder:
    """A function from Python values of type spec ``t`` to an Arrow column, equal to
    ``pa.array([codec.encoder(t)(x) for x in values], type)`` when it returns one."""
    exact = None
    if isinstance(t, PrimSpec):
        # a Spark type without an entry goes value by value, through the codec
        exact = _DECIMAL if t.spark.startswith("decimal") else _EXACT.get(t.spark)
    if exact is not None:
        exact_types = exact  # not None, for the closure

        def enc_prim(values: list[Any], type_: pa.DataType) -> pa.Array | None:
            if not exact_types.issuperset(map(type, values)):
                return None
            return _arrow(values, type_)

        return enc_prim
    if isinstance(t, RecordSpec):
        return _record_encoder(t, what)
    return mapped(codec.encoder(t, what), _arrow)


def mapped(fn: Callable[[Any], Any], then: ColumnEncoder) -> ColumnEncoder:
    """The column encoder that gives ``then`` each value's ``fn``; None where ``fn``
    raises (the per-record path finds the value and reports it)."""

    def enc(values: list[Any], type_: pa.DataType) -> pa.Array | None:
        try:
            converted = list(map(fn, values))
        except Exception:
            return None
        return then(converted, type_)

    return enc


def _arrow(values: list[Any], type_: pa.DataType) -> pa.Array | None:
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        # out of range, say: the per-record path says which record, and how
        return None


def _record_encoder(t: RecordSpec, what: str) -> ColumnEncoder:
    cls_name = getattr(t.cls, "__qualname__", str(t.cls))
    fields = [
        (operator.attrgetter(name), column_encoder(ft, f"{what}.{name}")) for name, ft in t.fields
    ]

    def enc_records(values: list[Any], type_: pa.DataType) -> pa.Array | None:
        # match by name: a class pickled by value is a different object on the server
        if any(tp.__qualname__ != cls_name for tp in set(map(type, values)) - {_NONE}):
            return None
        nulls = None
        objs = values
        if None in values:
            nulls = pa.array([v is None for v in values])
            objs = [v for v in values if v is not None]
        children = []
        for (get, enc), f in zip(fields, type_, strict=True):
            try:
                field_values = list(map(get, objs))
            except AttributeError:  # a look-alike class: the per-record path says so
                return None
            child = enc(field_values, f.type)
            if child is None:
                return None
            children.append(child)
        if nulls is not None:
            # the fields of a null record are nulls of their own
            positions = pa.array(_ranks(values), pa.int64())
            children = [c.take(positions) for c in children]
        return pa.StructArray.from_arrays(children, fields=list(type_), mask=nulls)

    return enc_records


def _ranks(values: list[Any]) -> list[int | None]:
    """For each value, its position among the non-null values, or None."""
    out: list[int | None] = []
    n = 0
    for v in values:
        if v is None:
            out.append(None)
        else:
            out.append(n)
            n += 1
    return out
