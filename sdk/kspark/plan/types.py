"""Mapping of Python key and value types to Spark types, without importing pyspark.

A :class:`TypeDesc` describes a key or value type. It produces the Spark type as the JSON
form that ``pyspark.sql.types.DataType.fromJson`` reads, and the type spec
(:mod:`kspark_server.spec`) that ``kspark_server`` uses to turn rows into objects and back.

Supported: ``str``, ``int`` (Spark ``long``), ``float`` (``double``), ``bool``, ``bytes``,
``datetime.datetime`` (``timestamp``), ``decimal.Decimal`` (``decimal(38,18)``),
``list[T]``, ``dict[str, T]``, ``T | None``, dataclasses and attrs classes (``struct``),
and dynamic values (:class:`Dynamic`: plain ``dict``, ``list``, ``typing.Any``, or no type
at all), carried as JSON text (``string``).

Examples
--------
>>> import dataclasses
>>> @dataclasses.dataclass
... class Rate:
...     currency: str
...     rate: float
>>> desc = describe_type(Rate)
>>> desc.spark_json()["fields"][1]
{'name': 'rate', 'type': 'double', 'nullable': True, 'metadata': {}}
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import types
import typing
from typing import Any, Union

import attrs

from kspark.errors import TypeMappingError
from kspark_server import codec
from kspark_server.envelope import field
from kspark_server.spec import JsonSpec, ListSpec, MapSpec, PrimSpec, RecordSpec, TypeSpec

__all__ = [
    "DYNAMIC",
    "PRIMITIVES",
    "Dynamic",
    "Field",
    "ListType",
    "MapType",
    "Primitive",
    "Record",
    "TypeDesc",
    "describe_type",
]

PRIMITIVES: dict[type, str] = {
    str: "string",
    int: "long",
    float: "double",
    bool: "boolean",
    bytes: "binary",
    datetime.datetime: "timestamp",
    decimal.Decimal: "decimal(38,18)",
}


@attrs.frozen(kw_only=True)
class Primitive:
    """A primitive Python type and its Spark type name."""

    py: type
    spark: str

    def spark_json(self) -> Any:
        return self.spark

    def spec(self) -> TypeSpec:
        return PrimSpec(spark=self.spark)

    def display(self) -> str:
        return self.py.__name__


@attrs.frozen(kw_only=True)
class ListType:
    """``list[T]``, a Spark array."""

    element: TypeDesc

    def spark_json(self) -> Any:
        return {"type": "array", "elementType": self.element.spark_json(), "containsNull": True}

    def spec(self) -> TypeSpec:
        return ListSpec(element=self.element.spec())

    def display(self) -> str:
        return f"list[{self.element.display()}]"


@attrs.frozen(kw_only=True)
class MapType:
    """``dict[str, T]``, a Spark map."""

    key: TypeDesc
    value: TypeDesc

    def spark_json(self) -> Any:
        return {
            "type": "map",
            "keyType": self.key.spark_json(),
            "valueType": self.value.spark_json(),
            "valueContainsNull": True,
        }

    def spec(self) -> TypeSpec:
        return MapSpec(key=self.key.spec(), value=self.value.spec())

    def display(self) -> str:
        return f"dict[{self.key.display()}, {self.value.display()}]"


@attrs.frozen(kw_only=True)
class Field:
    """One field of a record type."""

    name: str
    type: TypeDesc
    nullable: bool = True


@attrs.frozen(kw_only=True)
class Record:
    """A dataclass or attrs class, a Spark struct."""

    cls: type
    fields: tuple[Field, ...]

    def spark_json(self) -> Any:
        return {
            "type": "struct",
            "fields": [field(f.name, f.type.spark_json()) for f in self.fields],
        }

    def spec(self) -> TypeSpec:
        return RecordSpec(cls=self.cls, fields=tuple((f.name, f.type.spec()) for f in self.fields))

    def display(self) -> str:
        return self.cls.__qualname__


@attrs.frozen(kw_only=True)
class Dynamic:
    """A dynamic key or value: any JSON-compatible Python value, carried as JSON text in a
    Spark ``string`` column. A key or value with no declared or annotated type is dynamic;
    ``dict``, ``list`` and ``typing.Any`` declare one of that ``shape``."""

    shape: str = "any"

    def spark_json(self) -> Any:
        return "string"

    def spec(self) -> TypeSpec:
        return JsonSpec(shape=self.shape)

    def display(self) -> str:
        return self.shape


#: A dynamic value of any shape: the type of keys and values that nothing declares.
DYNAMIC = Dynamic()

TypeDesc = Primitive | ListType | MapType | Record | Dynamic


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        raise TypeMappingError(
            f"union type {tp!r} is not supported; use one type, optionally with None",
            type=repr(tp),
        )
    return tp, False


def describe_type(tp: Any) -> TypeDesc:
    """Describe a Python type for Spark.

    Parameters
    ----------
    tp
        A primitive, ``list[T]``, ``dict[str, T]``, ``T | None``, a dataclass or an attrs
        class; or ``dict``, ``list`` or ``typing.Any`` for a dynamic value of that shape.

    Raises
    ------
    TypeMappingError
        If the type has no Spark counterpart.
    """
    if tp is Any:
        return DYNAMIC
    if tp is dict or tp is list:
        return Dynamic(shape=tp.__name__)
    tp, _ = _strip_optional(tp)
    if tp is Any:
        return DYNAMIC
    if isinstance(tp, type) and tp in PRIMITIVES:
        return Primitive(py=tp, spark=PRIMITIVES[tp])
    origin = typing.get_origin(tp)
    if origin in (list, tuple, typing.Sequence) or tp in (list, tuple):
        args = typing.get_args(tp)
        if not args or (origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)):
            raise TypeMappingError(
                f"{tp!r} needs one element type, such as list[str]", type=repr(tp)
            )
        return ListType(element=describe_type(args[0]))
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        if len(args) != 2:
            raise TypeMappingError(
                f"{tp!r} needs key and value types, such as dict[str, int]", type=repr(tp)
            )
        return MapType(key=describe_type(args[0]), value=describe_type(args[1]))
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or attrs.has(tp)):
        return _describe_record(tp)
    raise TypeMappingError(
        f"type {tp!r} cannot be mapped to a Spark type; use a primitive (str, int, float, bool, "
        "bytes, datetime, Decimal), list[T], dict[str, T], a dataclass or an attrs class",
        type=repr(tp),
    )


def _describe_record(cls: type) -> Record:
    try:
        # the operators rebuild records through __init__: refuse a class they cannot
        # rebuild now, not on the server at its first record
        names = list(codec.init_args(cls))  # every field, in order
    except codec.UnsupportedRecordError as exc:
        raise TypeMappingError(
            f"{exc}. kspark decodes a record by calling its __init__ with its fields",
            type=cls.__qualname__,
            field=exc.field,
        ) from exc
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # a forward reference that cannot be resolved
        raise TypeMappingError(
            f"cannot resolve the field types of {cls.__qualname__}: {exc}", type=cls.__qualname__
        ) from exc
    fields = []
    for name in names:
        ftype, nullable = _strip_optional(hints[name])
        try:
            fields.append(Field(name=name, type=describe_type(ftype), nullable=nullable))
        except TypeMappingError as exc:
            raise TypeMappingError(
                f"field {cls.__qualname__}.{name}: {exc.message}", type=cls.__qualname__, field=name
            ) from exc
    return Record(cls=cls, fields=tuple(fields))


_JSON_LEAVES = frozenset({"string", "long", "double", "boolean"})


def json_packable(desc: TypeDesc) -> bool:
    """Whether values of ``desc`` travel as JSON text into a stateful operator and back
    unchanged: records, lists and maps of strings, integers, floats and booleans. Spark
    turns struct columns into Python objects row by row on the way into pandas; JSON text
    is far cheaper there (docs/design/json-values.md), and ``json.loads`` is fast in the worker."""

    def leaves_ok(d: TypeDesc) -> bool:
        if isinstance(d, Primitive):
            return d.spark in _JSON_LEAVES
        if isinstance(d, ListType):
            return leaves_ok(d.element)
        if isinstance(d, MapType):
            return leaves_ok(d.value)
        if isinstance(d, Record):
            return all(leaves_ok(f.type) for f in d.fields)
        return False

    return not isinstance(desc, Primitive) and leaves_ok(desc)
