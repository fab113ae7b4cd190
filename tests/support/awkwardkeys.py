"""Awkward keys for the local stores' mechanisms: empty, at LMDB's limits on a key (a
packed key of 503 bytes is stored as itself, one of 504 under a slot), 4 KiB and 1 MiB,
two 1 MiB keys that differ in their last byte only, and bytes that are not UTF-8."""

from __future__ import annotations

from typing import Any

MIB = 1 << 20


def awkward_keys(key: str) -> list[Any]:
    """Distinct keys of Spark type ``key`` (``string`` or ``binary``); the last two are
    1 MiB long and differ in their last byte only."""
    if key == "string":
        return [
            "",
            "ключ-€-😀",
            "a" * 500,  # with MessagePack's header: 503 bytes, the longest short key
            "a" * 501,
            "a" * 511,
            "a" * 512,
            "b" * 4096,
            "m" * MIB,
            "m" * (MIB - 1) + "n",
        ]
    return [
        b"",
        b"\x00",
        b"\xff\xfe\x80\xc3(",  # not UTF-8
        b"\x80" * 500,
        b"\x80" * 501,
        b"\xff" * 511,
        b"\xff" * 512,
        b"\xc3" * 4096,
        b"\x00\xff" * (MIB // 2),
        b"\x00\xff" * (MIB // 2 - 1) + b"\x00\xfe",
    ]
