"""The plan node of a time-limited suppression (``KTable.suppress(Suppressed.until_time_limit
(...))``); the final results of windows (``until_window_closes``) are
:class:`kspark.plan.grouped.Suppress`, fused into the aggregation.

Examples
--------
>>> from kspark.plan.nodes import TableSource
>>> from kspark.plan.types import describe_type
>>> t = TableSource(name="T", key_type=describe_type(str), value_type=describe_type(str),
...                 topic_name="t", store_name="T-STORE")
>>> s = SuppressTimeLimit(name="S", parent=t, key_type=t.key_type, value_type=t.value_type,
...                       store_name="S-STORE", time_limit_ms=1000)
>>> s.stores(), s.stateful
(('S-STORE',), True)
"""

from __future__ import annotations

from typing import Literal

import attrs

from kspark.errors import InvalidArgumentError
from kspark.plan.nodes import _OneStore, _Unary

__all__ = ["SuppressTimeLimit"]

#: What a time-limited suppression compiles to (``describe()`` shows it).
OPERATOR = "kspark task operator (per-task buffer)"


def _non_negative(_inst: object, attr: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and value < 0:
        raise InvalidArgumentError(f"{attr.name} must not be negative", parameter=attr.name)


@attrs.frozen(kw_only=True)
class SuppressTimeLimit(_OneStore, _Unary):
    """Each key's updates of the parent table held back until stream time passes the time
    of the key's oldest waiting update plus ``time_limit_ms``; only its latest goes out.
    ``max_records`` and ``max_bytes`` bound the buffer (None: no bound); ``when_full``:
    ``emit`` the oldest early, or ``shut_down`` the app (kspark_server.operators.suppress).
    """

    store_name: str
    time_limit_ms: int = attrs.field(validator=lambda i, a, v: _non_negative(i, a, v))
    max_records: int | None = attrs.field(default=None, validator=_non_negative)
    max_bytes: int | None = attrs.field(default=None, validator=_non_negative)
    when_full: Literal["emit", "shut_down"] = "emit"
    #: the name ``Suppressed.with_name`` gave (Kafka's buffer name)
    suppress_name: str | None = None

    @property
    def operator(self) -> str:
        return OPERATOR
