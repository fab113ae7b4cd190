"""Which operator runs a stateful spec: its kind's class.

A new stateful operator is a :class:`~kspark_server.operators.base.TaskProcessor` subclass
in its own module of this package, with a spec in :mod:`kspark_server.spec` whose ``kind``
names it here.

Examples
--------
>>> sorted(OPERATORS)
['aggregate', 'dedup', 'fkmatch', 'fkresolve', 'fksubscribe', 'join', 'processor', 'suppress', 'tablegroupby', 'tablejoin', 'windowjoin']
"""

from __future__ import annotations

from collections.abc import Callable

from kspark_server import localstore, stateenc
from kspark_server.operators.aggregate import AggregateProcessor
from kspark_server.operators.base import TaskProcessor
from kspark_server.operators.dedup import DedupProcessor
from kspark_server.operators.fk_match import FkMatchProcessor
from kspark_server.operators.fk_resolve import FkResolveProcessor
from kspark_server.operators.fk_subscribe import FkSubscribeProcessor
from kspark_server.operators.processor import UserProcessor
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.operators.suppress import SuppressProcessor
from kspark_server.operators.table_group_by import TableGroupByProcessor
from kspark_server.operators.table_join import TableJoinProcessor
from kspark_server.operators.window_join import WindowJoinProcessor
from kspark_server.spec import SpecError, StatefulSpec, check_spec

__all__ = ["OPERATORS", "make_operator", "time_index_of"]

#: The operator class of each stateful spec kind.
OPERATORS: dict[str, type[TaskProcessor]] = {
    "aggregate": AggregateProcessor,
    "dedup": DedupProcessor,
    "fkmatch": FkMatchProcessor,
    "fkresolve": FkResolveProcessor,
    "fksubscribe": FkSubscribeProcessor,
    "join": JoinProcessor,
    "processor": UserProcessor,
    "suppress": SuppressProcessor,
    "tablegroupby": TableGroupByProcessor,
    "tablejoin": TableJoinProcessor,
    "windowjoin": WindowJoinProcessor,
}


def make_operator(spec: StatefulSpec, constants_json: str = "") -> TaskProcessor:
    """The operator of ``spec`` (``constants_json``: the constant columns that its records
    travel without, :func:`kspark_server.chain.constant_widener`)."""
    kind = check_spec(spec).kind
    try:
        cls = OPERATORS[kind]
    except KeyError:
        raise SpecError(f"{spec.processor}: no stateful operator of kind {kind!r}") from None
    return cls(spec, constants_json)


def time_index_of(spec: StatefulSpec) -> Callable[[bytes, bytes], bytes] | None:
    """The local store's time-index key of an entry (its key and packed entry) of
    ``spec``'s operator, or None if the operator keeps no time index."""
    op = make_operator(spec)
    if not op.time_indexed:
        return None
    time_of, unpack = op.time_of, stateenc.unpack

    def index_of(k: bytes, e: bytes) -> bytes:
        return localstore.time_key(time_of(unpack(e)), k)

    return index_of
