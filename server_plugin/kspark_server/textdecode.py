"""Records from their JSON texts, a whole column in one call.

An operator that reads a JSON-packed record value parses each text (msgspec) and builds
the record from the parsed dict (:func:`kspark_server.codec.decoder`): two steps and two
Python calls per record. For a plain dataclass msgspec builds the records straight from
the texts, a column at a time, several times faster. :func:`texts_decoder` gives that
where it gives the very records the two steps give; a column it refuses (any text that
does not decode, or does not decode alone) goes back to the record-by-record path, which
hands each failing record to the exception handler.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from kspark_server.spec import PrimSpec, RecordSpec, TypeSpec

__all__ = ["texts_decoder"]

#: the Spark types of a field that msgspec decodes to each Python type, as the record
#: decoder takes them: a JSON value as it is, or for a float field an integer as a float
_SPARK_OF = {
    str: ("string",),
    int: ("long", "integer", "short", "byte"),
    float: ("double", "float"),
    bool: ("boolean",),
}

TextsDecoder = Callable[[list[str]], list[Any] | None]


def _plain_dataclass(t: TypeSpec) -> type | None:
    """The record class of ``t`` if msgspec decodes it as the record decoder does: a
    dataclass whose fields are all ``__init__`` arguments without defaults (a missing
    field is an error to both), of the types in :data:`_SPARK_OF`, set by the
    ``__init__`` that dataclasses writes (msgspec sets the fields without calling it),
    with no ``__post_init__``, ``__new__``, ``__setattr__`` or metaclass call of its own."""
    if not isinstance(t, RecordSpec):
        return None
    cls = t.cls
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return None
    # built as ``cls(...)`` builds it: no metaclass call, __new__ or __setattr__ of its own
    if type(cls).__call__ is not type.__call__ or cls.__new__ is not object.__new__:
        return None
    params = getattr(cls, "__dataclass_params__", None)
    frozen = bool(getattr(params, "frozen", False))
    if not frozen and cls.__setattr__ is not object.__setattr__:
        return None
    code = getattr(getattr(cls, "__init__", None), "__code__", None)
    # dataclasses compiles the __init__ it writes from text: a class's own __init__ is
    # compiled from its file
    if code is None or code.co_filename != "<string>":
        return None
    fields = dataclasses.fields(cls)
    missing = dataclasses.MISSING
    if any(
        not f.init or f.default is not missing or f.default_factory is not missing for f in fields
    ):
        return None
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve here: the record path reads it
        return None
    declared = dict(t.fields)
    if {f.name for f in fields} != set(declared) or len(declared) != len(t.fields):
        return None
    for f in fields:
        spec = declared[f.name]
        hint: Any = hints.get(f.name)
        if not isinstance(spec, PrimSpec) or spec.spark not in _SPARK_OF.get(hint, ()):
            return None
    return cls


def texts_decoder(t: TypeSpec) -> TextsDecoder | None:
    """A function from a column's JSON texts (no None) to their records of type spec
    ``t`` (None for a text ``null``), or None for the whole column where any text does
    not decode on its own; None where ``t`` is not a plain dataclass
    (:func:`_plain_dataclass`).

    Where it returns records they equal ``decoder(t, plain=True)(msgspec.json.decode(x))``
    for each text ``x``.

    Examples
    --------
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Rate:
    ...     currency: str
    ...     rate: float
    >>> spec = RecordSpec(cls=Rate, fields=(("currency", PrimSpec(spark="string")),
    ...                                     ("rate", PrimSpec(spark="double"))))
    >>> decode = texts_decoder(spec)
    >>> decode(['{"currency":"EUR","rate":1}', "null"])
    [Rate(currency='EUR', rate=1.0), None]
    >>> decode(['{"currency":"EUR"}']) is None  # a missing field: the record path says so
    True
    """
    cls = _plain_dataclass(t)
    if cls is None:
        return None
    try:
        # imported here: kspark_server travels to the workers by value, and a msgspec
        # decoder cannot be pickled, so each worker builds its own
        import msgspec

        decoder = msgspec.json.Decoder(cls | None)
    except Exception:  # a class msgspec does not take: the record path reads it
        return None
    lines = decoder.decode_lines

    def decode(texts: list[str]) -> list[Any] | None:
        if not texts:
            return []
        buf = "\n".join(texts)
        # one text per line: a text with a line break of its own, or a blank one that the
        # line reader skips, would shift the others
        if buf.count("\n") != len(texts) - 1:
            return None
        try:
            got: list[Any] = lines(buf)
        except Exception:  # a text that does not decode: the record path says which
            return None
        return got if len(got) == len(texts) else None

    return decode
