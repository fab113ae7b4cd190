"""How state is encoded (state format 6): MessagePack with a few extension types, no pickle.

Every byte string that a stateful operator writes to its state files, and that a
client, a replica or a rescale reads back, is MessagePack (https://msgpack.org), written
and read with ``msgspec``. Any language with a MessagePack library can read it; reading it
runs no code, unlike pickle.

Values map to MessagePack as follows. The extension types exist because MessagePack has
no tuple, decimal or naive date-time, and the state needs all three: keys are hashable
tuples (:func:`kspark_server.codec.hashable`), and a table's values keep their Spark
types.

==================  =========================================================
Python              MessagePack
==================  =========================================================
None, bool, int     nil, bool, int (up to 64 bits)
float, str, bytes   float 64, str, bin
list, dict          array, map
tuple               ext 1: the elements as an array
Decimal             ext 2: its text (``str(d)``)
datetime            ext 3: ISO 8601 text (with its offset when it has one)
date                ext 4: ISO 8601 text
dict, keys not str  ext 5: an array of ``[key, value]`` arrays
==================  =========================================================

A task's state is stored as *pairs* ``(key bytes, entry bytes)``: each half encoded on its
own, so that the executor-local store (:mod:`kspark_server.localstore`) can use them as
they are, without decoding, and an entry of None (a removed key) is a nil. A *chunk* of a
base and a *change* (:mod:`kspark_server.taskstate`) share one layout, a map framed by
:data:`MAGIC` and carrying the state format (:data:`FORMAT`)::

    MAGIC + msgpack({"format": 6, "scalars": {...}, "pairs": [[key, entry or nil], ...]})

Examples
--------
>>> from decimal import Decimal
>>> unpack(pack(("EUR", 1)))
('EUR', 1)
>>> unpack(pack({"rate": Decimal("1.10"), "at": [1, 2]}))
{'rate': Decimal('1.10'), 'at': [1, 2]}
>>> frame = encode_frame({"stream_time": 5}, [(pack("a"), pack((5, 11))), (pack("b"), None)])
>>> scalars, pairs = decode_frame(frame)
>>> scalars, [(unpack(k), None if e is None else unpack(e)) for k, e in pairs]
({'stream_time': 5}, [('a', (5, 11)), ('b', None)])
"""

from __future__ import annotations

import datetime as _dt
import sys
import types
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, Protocol, cast

import msgspec

#: The state format: the layout of the frames these functions write, and of the task
#: state they make up (:mod:`kspark_server.taskstate`). Every frame carries it.
FORMAT = 6
#: The first bytes of every base chunk and change.
MAGIC = b"KSSF"

_TUPLE, _DECIMAL, _DATETIME, _DATE, _MAP = 1, 2, 3, 4, 5
_SCALAR = (str, int, float, bool, bytes, type(None))
_SCALARS = frozenset(_SCALAR)

_HOLDER = "_kspark_stateenc_codec"


class _Codec(Protocol):
    enc: msgspec.msgpack.Encoder
    dec: msgspec.msgpack.Decoder[Any]


def _codec() -> _Codec:
    """The MessagePack encoder and decoder, made once per process. Kept in
    ``sys.modules``, not in globals of this module: when the client ships kspark_server
    by value, this module's globals are pickled, and msgspec's objects cannot be."""
    holder = sys.modules.get(_HOLDER)
    if holder is None:
        holder = types.ModuleType(_HOLDER)
        holder.enc = msgspec.msgpack.Encoder()  # type: ignore[attr-defined]
        holder.dec = msgspec.msgpack.Decoder(ext_hook=_ext)  # type: ignore[attr-defined]
        holder = sys.modules.setdefault(_HOLDER, holder)
    return cast(_Codec, holder)


class StateFormatError(ValueError):
    """Bytes that are not state of a format this package reads."""


def _tag(x: Any) -> Any:
    """``x`` with every value MessagePack has no type for turned into its extension."""
    t = type(x)
    if t in _SCALAR:
        return x
    if t is tuple:
        if _SCALARS.issuperset(map(type, x)):  # no element to tag (a version list)
            return msgspec.msgpack.Ext(_TUPLE, _codec().enc.encode(x))
        return msgspec.msgpack.Ext(_TUPLE, _codec().enc.encode([_tag(v) for v in x]))
    if t is list:
        return x if _SCALARS.issuperset(map(type, x)) else [_tag(v) for v in x]
    if t is dict:
        if all(type(k) is str for k in x):
            return {k: _tag(v) for k, v in x.items()}
        return msgspec.msgpack.Ext(
            _MAP, _codec().enc.encode([[_tag(k), _tag(v)] for k, v in x.items()])
        )
    if isinstance(x, Decimal):
        return msgspec.msgpack.Ext(_DECIMAL, str(x).encode())
    if isinstance(x, _dt.datetime):
        return msgspec.msgpack.Ext(_DATETIME, x.isoformat().encode())
    if isinstance(x, _dt.date):
        return msgspec.msgpack.Ext(_DATE, x.isoformat().encode())
    if isinstance(x, bool | int | float | str | bytes):
        return x
    if isinstance(x, tuple):
        return msgspec.msgpack.Ext(_TUPLE, _codec().enc.encode([_tag(v) for v in x]))
    if isinstance(x, list):
        return [_tag(v) for v in x]
    raise StateFormatError(f"a value of type {t.__name__} cannot be kept in state: {x!r}")


def _ext(code: int, data: memoryview) -> Any:
    if code == _TUPLE:
        return tuple(_codec().dec.decode(data))
    if code == _MAP:
        return {k: v for k, v in _codec().dec.decode(data)}
    text = bytes(data).decode()
    if code == _DECIMAL:
        return Decimal(text)
    if code == _DATETIME:
        return _dt.datetime.fromisoformat(text)
    if code == _DATE:
        return _dt.date.fromisoformat(text)
    raise StateFormatError(f"unknown MessagePack extension type {code} in state")


def pack(x: Any) -> bytes:
    """``x`` as MessagePack bytes, with the extension types above.

    Equal keys of one type give equal bytes, so the bytes serve as the key in the
    executor-local store.
    """
    if type(x) is str or type(x) is int:
        return _codec().enc.encode(x)
    return _codec().enc.encode(_tag(x))


def unpack(data: bytes | memoryview) -> Any:
    """The value :func:`pack` encoded."""
    return _codec().dec.decode(data)


def encode_frame(scalars: dict[str, Any], pairs: Iterable[tuple[bytes, bytes | None]]) -> bytes:
    """A base or a change: ``scalars`` and the ``(key, entry)`` pairs, framed."""
    body = {"format": FORMAT, "scalars": _tag(scalars), "pairs": [[k, e] for k, e in pairs]}
    return MAGIC + _codec().enc.encode(body)


def decode_frame(blob: bytes) -> tuple[dict[str, Any], Sequence[tuple[bytes, bytes | None]]]:
    """The scalars and pairs of a frame from :func:`encode_frame`; the halves of each pair
    stay encoded."""
    if bytes(blob[: len(MAGIC)]) != MAGIC:
        raise StateFormatError(
            "this is not a kspark state frame (it was not written by kspark's stateful operators)"
        )
    body = _codec().dec.decode(memoryview(blob)[len(MAGIC) :])
    if body.get("format") != FORMAT:
        raise StateFormatError(
            f"this state is in state format {body.get('format')!r}; this kspark reads state "
            f"format {FORMAT}: use the kspark version that wrote it"
        )
    return body["scalars"], [(bytes(k), None if e is None else bytes(e)) for k, e in body["pairs"]]
