"""Row values to Python objects and back, driven by type specs.

Decoders accept what Arrow (``to_pylist``) and pandas (dicts and numpy arrays) give.
Encoders check each value against its declared type, so that a wrong type fails on the
record that has it, with a message that names the type, rather than failing a whole Arrow
batch.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

from kspark_server.spec import ListSpec, MapSpec, PrimSpec, TypeSpec

Codec = Callable[[Any], Any]

_NATIVE = (int, str, float, bool, bytes, type(None))


def native(x: Any) -> Any:
    if type(x) in _NATIVE:
        return x
    if hasattr(x, "to_pydatetime"):
        return x.to_pydatetime()
    if hasattr(x, "item"):
        return x.item()
    return x


def _identity(x: Any) -> Any:
    return x


def decoder(t: TypeSpec, nested: bool = False) -> Codec:
    """A function from a column value to the Python object of type spec ``t``."""
    if isinstance(t, PrimSpec):
        return native if nested else _identity
    if isinstance(t, ListSpec):
        elem = decoder(t.element, nested=True)
        return lambda x: None if x is None else [elem(e) for e in x]
    if isinstance(t, MapSpec):
        kd, vd = decoder(t.key, True), decoder(t.value, True)

        def dec_map(x: Any) -> Any:
            if x is None:
                return None
            items = x.items() if isinstance(x, dict) else x  # Arrow gives [(k, v), ...]
            return {kd(k): vd(v) for k, v in items}

        return dec_map
    cls = t.cls
    fields = [(name, decoder(ft, nested=True)) for name, ft in t.fields]

    def dec_record(x: Any) -> Any:
        if x is None:
            return None
        return cls(**{name: dec(x[name]) for name, dec in fields})

    return dec_record


_PRIM_CHECK: dict[str, tuple[tuple[type, ...], Callable[[Any], Any]]] = {
    "string": ((str,), _identity),
    "long": ((int,), int),
    "double": ((float, int), float),
    "boolean": ((bool,), _identity),
    "binary": ((bytes, bytearray), bytes),
    "timestamp": ((datetime.datetime,), _identity),
}


class EncodeError(TypeError):
    """A value does not match its declared type."""


def encoder(t: TypeSpec, what: str = "value") -> Codec:
    """A function from a Python object of type spec ``t`` to a column value."""
    if isinstance(t, PrimSpec):
        spark = t.spark
        if spark.startswith("decimal"):
            accepted: tuple[type, ...] = (decimal.Decimal, int)
            conv: Callable[[Any], Any] = decimal.Decimal
        else:
            accepted, conv = _PRIM_CHECK[spark]
        bool_ok = spark == "boolean"

        def enc_prim(x: Any) -> Any:
            if x is None:
                return None
            if isinstance(x, accepted) and (bool_ok or not isinstance(x, bool)):
                return conv(x)
            raise EncodeError(
                f"{what} {x!r} is a {type(x).__name__}, but the declared type is {spark}; "
                "declare the right type (value_type=/key_type=) or convert the value"
            )

        return enc_prim
    if isinstance(t, ListSpec):
        elem = encoder(t.element, f"element of {what}")
        return lambda x: None if x is None else [elem(e) for e in x]
    if isinstance(t, MapSpec):
        ke, ve = encoder(t.key, f"key of {what}"), encoder(t.value, f"value of {what}")
        return lambda x: None if x is None else {ke(k): ve(v) for k, v in x.items()}
    cls = t.cls
    fields = [(name, encoder(ft, f"{what}.{name}")) for name, ft in t.fields]
    cls_name = getattr(cls, "__qualname__", str(cls))

    def enc_record(x: Any) -> Any:
        if x is None:
            return None
        # match by name: a class pickled by value is a different object on the server
        if type(x).__qualname__ != cls_name:
            raise EncodeError(
                f"{what} {x!r} is a {type(x).__name__}, but the declared type is {cls_name}"
            )
        return {name: enc(getattr(x, name)) for name, enc in fields}

    return enc_record


def plain(x: Any) -> Any:
    """A picklable, hashable-friendly copy of a pandas/Arrow cell: no numpy inside."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple) or (
        hasattr(x, "tolist") and hasattr(x, "dtype") and getattr(x, "ndim", 0) > 0
    ):
        return [plain(v) for v in x]
    return native(x)


def hashable(x: Any) -> Any:
    """A hashable form of a key or id, equal for equal values."""
    if isinstance(x, dict):
        return tuple(sorted((k, hashable(v)) for k, v in x.items()))
    if isinstance(x, list | tuple):
        return tuple(hashable(v) for v in x)
    if hasattr(x, "__dataclass_fields__") or hasattr(x, "__attrs_attrs__"):
        names = getattr(x, "__dataclass_fields__", None) or [a.name for a in x.__attrs_attrs__]
        return (type(x).__qualname__, tuple(hashable(getattr(x, n)) for n in names))
    if hasattr(x, "tolist") and getattr(x, "ndim", 0) > 0:
        return tuple(hashable(v) for v in x.tolist())
    return native(x)
