"""Dynamic values of every shape, at their edges, and an equality that tells their
types apart: for the tests of dynamic keys and values through internal topics."""

from __future__ import annotations

import math
from typing import Any

#: Values of every shape a dynamic key or value takes, at their edges.
SHAPES: list[Any] = [
    None,
    True,
    False,
    0,
    -(2**63),
    2**63 - 1,
    2**64,
    -(2**100),
    0.1,
    -0.0,
    1.0,
    1e16,
    1.7976931348623157e308,
    5e-324,
    "",
    "é✓𝄞 中文",
    "\ud800",  # a lone surrogate: no UTF-8 encoding, kept as a JSON escape
    '\x00\n"\\',
    "x" * (1 << 20),
    [],
    {},
    [[]],
    {"a": [1, {"b": None, "c": [2.5, "d"]}], "é": {"": False}},
]


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``1``, ``1.0`` and ``True`` differ,
    and so do ``0.0`` and ``-0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)
