"""Struct columns crossing the stateful operators' Python worker as flat columns.

pyspark hands ``applyInPandasWithState`` a struct column as one Python ``dict`` per row,
and converts the frames it gets back the same way, row by row: for a deduplicated record's
value, which the operator only carries, that is most of the Python work. So a struct
column that crosses unread leaves the JVM as flat columns (:func:`leaves`), numpy or
Arrow-backed in pandas with no Python object per number, and is put back together on the
other side: in Arrow before the operator (:func:`nest`), by a projection in the JVM after
it (:func:`unnest` makes the operator's flat columns).

The flat columns: each struct's null flag (the column's own and each nested struct's);
each text, binary or boolean field as it is; each number as a value that is never null
(0 for null) and a null flag, since pandas holds a null integer as a float (exact only to
2**53) and a null double as NaN (which pyspark reads back as null). A struct with a field
of another type (a list, a map, a timestamp, ...) crosses as it is.

Examples
--------
>>> t = {"type": "struct", "fields": [
...     {"name": "a", "type": "long", "nullable": True, "metadata": {}},
...     {"name": "b", "type": {"type": "struct", "fields": [
...         {"name": "c", "type": "string", "nullable": True, "metadata": {}}]},
...      "nullable": True, "metadata": {}}]}
>>> [(x.name, x.path, x.kind) for x in leaves("value", t)]  # doctest: +NORMALIZE_WHITESPACE
[('value__ks0', (), 'struct_null'), ('value__ks1', ('a',), 'value'),
 ('value__ks2', ('a',), 'null'), ('value__ks3', ('b',), 'struct_null'),
 ('value__ks4', ('b', 'c'), 'value')]
>>> import pyarrow as pa
>>> col = pa.array([{"a": 2**62 + 1, "b": {"c": "x"}}, None, {"a": None, "b": None}],
...                pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.string())]))]))
>>> flat = unnest(pa.table({"value": col}), ["value"])
>>> flat.column_names
['value__ks0', 'value__ks1', 'value__ks2', 'value__ks3', 'value__ks4']
>>> nest(flat, {"value": col.type}).column("value").to_pylist()
[{'a': 4611686018427387905, 'b': {'c': 'x'}}, None, {'a': None, 'b': None}]
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NUMBERS", "Leaf", "flattenable", "leaves", "nest", "unnest"]

#: Spark's number types, whose fields cross as a value and a null flag
NUMBERS = ("byte", "short", "integer", "long", "float", "double")
#: Spark's types whose fields cross as they are
_AS_IS = ("string", "binary", "boolean")


class Leaf(NamedTuple):
    """One flat column of a struct column: its ``name``, the ``path`` of fields from the
    column, and what it holds: the field's ``value``, its ``null`` flag (a number's), or
    the ``struct_null`` flag of the struct at ``path``."""

    name: str
    path: tuple[str, ...]
    kind: Literal["value", "null", "struct_null"]


def _arrow(t: Any) -> Any:
    """pyarrow if ``t`` is an Arrow type, else None. The client reads Spark's JSON types
    only, and builds no Arrow: it need not import pyarrow (and numpy) for that."""
    pa = sys.modules.get("pyarrow")
    return pa if pa is not None and isinstance(t, pa.DataType) else None


def _fields(t: Any) -> list[tuple[str, Any]] | None:
    """A type's fields (name, type), as Spark's JSON or Arrow has them; None if not a
    struct."""
    if pa := _arrow(t):
        if not pa.types.is_struct(t):
            return None
        return [(t.field(i).name, t.field(i).type) for i in range(t.num_fields)]
    if isinstance(t, dict) and t.get("type") == "struct":
        return [(f["name"], f["type"]) for f in t["fields"]]
    return None


def _is_number(t: Any) -> bool:
    if pa := _arrow(t):
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t))
    return t in NUMBERS


def _simple(t: Any) -> bool:
    if pa := _arrow(t):
        return bool(
            pa.types.is_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_boolean(t)
            or (pa.types.is_integer(t) and t.bit_width <= 64)
            or pa.types.is_float32(t)
            or pa.types.is_float64(t)
        )
    return t in NUMBERS or t in _AS_IS


def flattenable(t: Any) -> bool:
    """Whether a column of type ``t`` (Spark's JSON or Arrow) crosses as flat columns: a
    struct with fields, each a number, text, binary, a boolean or such a struct."""
    fields = _fields(t)
    if not fields:
        return False
    return all(_simple(ft) or flattenable(ft) for _, ft in fields)


def leaves(name: str, t: Any) -> list[Leaf]:
    """The flat columns of struct column ``name`` of type ``t`` (Spark's JSON or Arrow),
    in the same order on both sides: depth first, each struct's null flag before its
    fields, a number's value before its null flag."""
    out: list[Leaf] = []

    def add(path: tuple[str, ...], kind: Literal["value", "null", "struct_null"]) -> None:
        out.append(Leaf(f"{name}__ks{len(out)}", path, kind))

    def walk(path: tuple[str, ...], tt: Any) -> None:
        fields = _fields(tt)
        if fields is None:
            add(path, "value")
            if _is_number(tt):
                add(path, "null")
            return
        add(path, "struct_null")
        for fname, ftype in fields:
            walk((*path, fname), ftype)

    walk((), t)
    return out


def _combined(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def nest(table: pa.Table, columns: dict[str, pa.DataType]) -> pa.Table:
    """``table`` with each of ``columns`` (name -> its struct type) put back from its flat
    columns (:func:`leaves`), in the place of its first flat column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, t in columns.items():
        flat = leaves(name, t)
        at = table.column_names.index(flat[0].name)
        by = {(x.path, x.kind): _combined(table.column(x.name)) for x in flat}

        def build(path: tuple[str, ...], tt: pa.DataType, by: dict[Any, pa.Array] = by) -> pa.Array:
            fields = _fields(tt)
            if fields is None:
                arr = by[(path, "value")]
                arr = arr if arr.type == tt else arr.cast(tt)
                if (path, "null") in by:
                    if pa.types.is_floating(tt):
                        # the value is never null: a null here was NaN, which pandas'
                        # conversion to Arrow reads as null
                        arr = pc.fill_null(arr, pa.scalar(float("nan"), tt))
                    null = pc.fill_null(by[(path, "null")], True)
                    arr = pc.if_else(null, pa.scalar(None, tt), arr)
                return arr
            children = [build((*path, f), ft) for f, ft in fields]
            mask = pc.fill_null(by[(path, "struct_null")], True)
            return pa.StructArray.from_arrays(
                children, fields=[tt.field(i) for i in range(tt.num_fields)], mask=mask
            )

        nested = build((), t)
        table = table.drop_columns([x.name for x in flat])
        table = table.add_column(at, pa.field(name, t), nested)
    return table


def unnest(table: pa.Table, columns: list[str]) -> pa.Table:
    """``table`` with each :func:`flattenable` column of ``columns`` as its flat columns
    (:func:`leaves`), in its place."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in columns:
        if name not in table.column_names:
            continue
        col = _combined(table.column(name))
        if not flattenable(col.type):
            continue
        at = table.column_names.index(name)
        table = table.remove_column(at)
        for i, x in enumerate(leaves(name, col.type)):
            node: pa.Array = col
            for f in x.path:
                # a child is null wherever a parent is
                node = pc.struct_field(node, f)
            if x.kind != "value":
                value = pc.is_null(node)
            elif _is_number(node.type):
                value = pc.fill_null(node, pa.scalar(0, node.type))
            else:
                value = node
            table = table.add_column(at + i, x.name, value)
    return table
