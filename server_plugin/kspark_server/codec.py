"""Row values to Python objects and back, driven by type specs.

Decoders accept what Arrow (``to_pylist``) and pandas (dicts and numpy arrays) give.
Encoders check each value against its declared type, so that a wrong type fails on the
record that has it, with a message that names the type, rather than failing a whole Arrow
batch.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import inspect
import json
import keyword
from collections.abc import Callable
from typing import Any

from kspark_server.spec import JsonSpec, ListSpec, MapSpec, PrimSpec, RecordSpec, TypeSpec

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


def _float(x: Any) -> Any:
    return float(x) if type(x) is int else native(x)


def _plain_float(x: Any) -> Any:
    # :func:`_float` for plain values, which :func:`native` leaves as they are
    return float(x) if type(x) is int else x


def _long(x: Any) -> Any:
    # pandas holds a long column with a null as float64 (a stream-table join's frame has
    # both sides' rows, so each side's column has nulls): an int comes back as 2.0
    return int(x) if type(x) is float else x


def decoder(t: TypeSpec, nested: bool = False, plain: bool = False) -> Codec:
    """A function from a column value to the Python object of type spec ``t``.

    ``plain``: the values are plain Python already (parsed JSON, Arrow's ``to_pylist``),
    never numpy or pandas scalars, so a record's primitive fields are taken as they are.
    """
    if isinstance(t, PrimSpec):
        if nested and t.spark in ("double", "float"):
            # a JSON number without a fraction (a dynamic value converted) is still a float
            return _plain_float if plain else _float
        if not nested and t.spark == "long":
            return _long
        return native if nested else _identity
    if isinstance(t, JsonSpec):
        return _json_decode
    if isinstance(t, ListSpec):
        elem = decoder(t.element, nested=True, plain=plain)
        return lambda x: None if x is None else [elem(e) for e in x]
    if isinstance(t, MapSpec):
        kd, vd = decoder(t.key, True, plain), decoder(t.value, True, plain)

        def dec_map(x: Any) -> Any:
            if x is None:
                return None
            items = x.items() if isinstance(x, dict) else x  # Arrow gives [(k, v), ...]
            return {kd(k): vd(v) for k, v in items}

        return dec_map
    cls = t.cls
    init = init_args(cls)
    # fields the class's __init__ takes, by its argument name (an attrs field ``_x`` is
    # argument ``x``, or its alias); the others are set once the object is built
    by_arg: list[tuple[str, str, Codec]] = []
    after: list[tuple[str, Codec]] = []
    for name, ft in t.fields:
        arg = init[name]
        if arg is None:
            after.append((name, decoder(ft, nested=True, plain=plain)))
        else:
            by_arg.append((arg, name, decoder(ft, nested=True, plain=plain)))
    # plain values: a field whose decoder is ``native`` (the identity on them) is taken
    # as it is
    fields = [(arg, name, None if plain and dec is native else dec) for arg, name, dec in by_arg]
    if all(arg.isidentifier() and not keyword.iskeyword(arg) for arg, _, _ in fields):
        return _record_decoder(cls, fields, after)

    def dec_record(x: Any) -> Any:
        if x is None:
            return None
        obj = cls(**{arg: x[name] if dec is None else dec(x[name]) for arg, name, dec in fields})
        for name, dec in after:
            # frozen and slotted classes too: the value is the one that was encoded
            object.__setattr__(obj, name, dec(x[name]))
        return obj

    return dec_record


def _record_decoder(
    cls: type, fields: list[tuple[str, str, Codec | None]], after: list[tuple[str, Codec]]
) -> Codec:
    """A record decoder that calls ``cls`` with one keyword argument per field, written
    out (``cls(a=x["a"], b=dec_b(x["b"]))``): a record per stream record is the join's and
    the processors' hottest loop, and building a dict of the arguments first costs about
    as much as the call. ``fields``: (argument, field name, decoder or None: as it is),
    argument names that are identifiers; ``after``: fields set once the object is built."""
    scope: dict[str, Any] = {"cls": cls, "setattr": object.__setattr__}
    args = []
    for i, (arg, name, dec) in enumerate(fields):
        scope[f"n{i}"] = name
        if dec is None:
            args.append(f"{arg}=x[n{i}]")
        else:
            scope[f"d{i}"] = dec
            args.append(f"{arg}=d{i}(x[n{i}])")
    lines = [
        "def dec_record(x):",
        "    if x is None:",
        "        return None",
        f"    obj = cls({', '.join(args)})",
    ]
    for j, (name, dec) in enumerate(after):
        # frozen and slotted classes too: the value is the one that was encoded
        scope[f"an{j}"], scope[f"ad{j}"] = name, dec
        lines.append(f"    setattr(obj, an{j}, ad{j}(x[an{j}]))")
    lines.append("    return obj")
    # the source holds identifiers and generated names only: no value is spliced in
    exec("\n".join(lines), scope)
    dec_record: Codec = scope["dec_record"]
    return dec_record


class UnsupportedRecordError(TypeError):
    """A record class that the decoder cannot rebuild; ``field`` is None when the class as a
    whole is the problem."""

    def __init__(self, cls: type, field: str | None, reason: str) -> None:
        where = cls.__qualname__ if field is None else f"{cls.__qualname__}.{field}"
        super().__init__(f"{where}: {reason}")
        self.cls, self.field, self.reason = cls, field, reason


def init_args(cls: type) -> dict[str, str | None]:
    """Each field of a dataclass or attrs class, by attribute name, mapped to the
    ``__init__`` argument that sets it, or to None when ``__init__`` does not take it
    (``init=False``), as dataclasses and attrs define their ``__init__``.

    Raises :class:`UnsupportedRecordError` when the class's ``__init__`` does not match:
    a hand-written one that lacks a field's argument, or one that requires an argument
    that is not a field (an ``InitVar`` without a default), which a record read back
    cannot supply. Reads the class only (attrs need not be installed).

    Examples
    --------
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Order:
    ...     id: str
    ...     total: float = dataclasses.field(init=False, default=0.0)
    >>> init_args(Order)
    {'id': 'id', 'total': None}
    """
    attributes = getattr(cls, "__attrs_attrs__", None)
    args: dict[str, str | None]
    if attributes is not None:
        # attrs' argument for a field is its alias: by default the name without leading
        # underscores
        args = {
            a.name: (getattr(a, "alias", None) or a.name.lstrip("_")) if a.init else None
            for a in attributes
        }
    elif dataclasses.is_dataclass(cls):
        args = {f.name: f.name if f.init else None for f in dataclasses.fields(cls)}
    else:
        raise UnsupportedRecordError(cls, None, "is neither a dataclass nor an attrs class")
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for name, arg in args.items():
        if arg is not None and arg not in params and not takes_any:
            raise UnsupportedRecordError(
                cls, name, f"its __init__ takes no argument {arg!r} to set this field"
            )
    wanted = {a for a in args.values() if a is not None}
    for p in params.values():
        required = p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        if required and p.name not in wanted:
            raise UnsupportedRecordError(
                cls,
                p.name,
                "is a required __init__ argument but not a field (an InitVar?), so a record "
                "read back cannot supply it; give it a default",
            )
    return args


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
    if isinstance(t, JsonSpec):
        return _json_encoder(t.shape, what)
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


# -- dynamic values: JSON text ---------------------------------------------------------


def _json_decode(x: Any) -> Any:
    """A dynamic value from its column: JSON text, or None for a null column."""
    if x is None:
        return None
    try:
        return json.loads(x)
    except ValueError:
        # Spark's JSON reader hands a JSON string over without its quotes, so a file
        # written by hand ({"value": "abc"}) gives the text itself
        return x


def decode_json_texts(texts: list[Any]) -> list[Any]:
    """The dynamic values of a column's JSON texts: ``[decoder(JsonSpec())(x) for x in
    texts]``, faster.

    msgspec parses JSON text about eight times faster than ``json.loads``
    (docs/design/json-values.md). Where it parses, it gives the same values (big integers too);
    what it refuses and ``json.loads`` reads (``NaN``, ``1e400``, lone surrogates) goes to
    ``json.loads``, so every text reads as it always did.

    Examples
    --------
    >>> decode_json_texts(['{"b":[1,2.5]}', "NaN", None, "abc"])
    [{'b': [1, 2.5]}, nan, None, 'abc']
    """
    try:
        # imported here, in the process that decodes: kspark_server travels to the
        # workers by value, a msgspec decoder cannot be pickled, and the workers of a
        # stateless app are not required to have msgspec (kspark.runtime.workers)
        import msgspec
    except ImportError:  # pragma: no cover - msgspec is a dependency of kspark itself
        return [_json_decode(x) for x in texts]
    fast, refused = msgspec.json.decode, msgspec.MsgspecError
    out: list[Any] = []
    append = out.append
    for x in texts:
        if x is None:
            append(None)
            continue
        try:
            append(fast(x))
        except refused:
            append(_json_decode(x))
    return out


def _json_encoder(shape: str, what: str) -> Codec:
    # sorted keys: equal values give equal text, so dynamic keys partition, join and
    # deduplicate by value
    dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode
    wanted = {"dict": dict, "list": list | tuple}.get(shape)

    def enc_json(x: Any) -> Any:
        if x is None:
            return None
        if wanted is not None and not isinstance(x, wanted):
            raise EncodeError(
                f"{what} {x!r} is a {type(x).__name__}, but the declared type is {shape}"
            )
        try:
            return dumps(x)
        except (TypeError, ValueError) as exc:
            raise EncodeError(
                f"{what} {x!r} is not JSON-compatible ({exc}); a value with no declared type "
                "must be None, bool, int, float, str, or a list or dict of them: declare its "
                "type (value_type=/key_type=) or convert it"
            ) from exc

    return enc_json


def converter(t: TypeSpec, what: str = "value") -> Codec:
    """A function from a dynamic value (as :func:`json.loads` gives it) to the Python value
    of type spec ``t``: a dict becomes a record, a list a list of ``t``'s elements. Raises
    :class:`EncodeError` when the value does not convert.

    Examples
    --------
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Rate:
    ...     currency: str
    ...     rate: float
    >>> spec = RecordSpec(cls=Rate, fields=(("currency", PrimSpec(spark="string")),
    ...                                     ("rate", PrimSpec(spark="double"))))
    >>> converter(spec)({"currency": "EUR", "rate": 1})
    Rate(currency='EUR', rate=1.0)
    >>> converter(PrimSpec(spark="long"))("7")
    Traceback (most recent call last):
    ...
    kspark_server.codec.EncodeError: value '7' is a str, but the declared type is long; ...
    """
    enc = encoder(t, what)
    if isinstance(t, PrimSpec):
        return enc  # checks the value, and makes an int a float where one is declared
    if isinstance(t, JsonSpec):

        def check_json(x: Any) -> Any:
            enc(x)
            return x

        return check_json
    dec = decoder(t, nested=True)

    def convert(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(t, RecordSpec) and not isinstance(x, dict):
            enc(x)  # already a record: check it
            return x
        try:
            value = dec(x)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EncodeError(
                f"{what} {x!r} cannot be read as the declared type: {type(exc).__name__}: {exc}"
            ) from exc
        enc(value)
        return value

    return convert


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
