"""The stream-stream join's DSL rule: the node that ``KStream.join``, ``left_join`` and
``outer_join`` add when their second argument is a stream (:mod:`kspark.dsl.streams`
holds the methods and their typed overloads)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kspark.dsl import _infer
from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.options import Named
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.types import DYNAMIC, Dynamic

if TYPE_CHECKING:
    from kspark.dsl.streams import KStream

__all__ = ["stream_join"]

#: Processor name prefixes, as Kafka Streams names the join's (merge) processor.
_PREFIX = {"inner": "KSTREAM-JOIN", "left": "KSTREAM-LEFTJOIN", "outer": "KSTREAM-OUTERJOIN"}


def stream_join(
    this: KStream[Any, Any],
    other: KStream[Any, Any],
    joiner: Callable[..., Any],
    windows: object,
    stream_joined: StreamJoined | Named | None,
    value_type: type[Any] | None,
    mode: str,
) -> n.StreamStreamJoin:
    """The plan node of ``this.<mode>_join(other, joiner, windows, stream_joined)``."""
    builder = this._builder
    opts = stream_joined if stream_joined is not None else StreamJoined()
    if isinstance(opts, Named):
        opts = StreamJoined(name=opts.name)
    if not isinstance(opts, StreamJoined):
        raise InvalidArgumentError(
            f"stream_joined must be a StreamJoined or Named, got {opts!r}",
            parameter="stream_joined",
        )
    name, seq = builder._next(_PREFIX[mode], opts.name)
    if not isinstance(windows, JoinWindows):
        raise InvalidArgumentError(
            f"{name}: a stream-stream join needs JoinWindows (for example "
            "JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))), got "
            f"{windows!r}",
            processor=name,
            parameter="windows",
        )
    if other._builder is not builder:
        raise InvalidTopologyError(
            f"{name}: the other stream comes from another StreamsBuilder", processor=name
        )
    _infer.check_callable(joiner, "joiner", name)
    lt, rt = this.node.key_type or DYNAMIC, other.node.key_type or DYNAMIC
    if not isinstance(lt, Dynamic) and not isinstance(rt, Dynamic) and lt != rt:
        raise InvalidTopologyError(
            f"{name}: the streams' key types differ ({lt.display()} and {rt.display()}); "
            "select_key one of them first",
            processor=name,
        )
    store = opts.store_name or builder._store_name(_PREFIX[mode])
    return n.StreamStreamJoin(
        name=name,
        seq=seq,
        left=this.node,
        right=other.node,
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        mode=mode,
        before_ms=windows.before_ms,
        after_ms=windows.after_ms,
        grace_ms=windows.grace_ms,
        store_name=store,
        key_type=rt if isinstance(lt, Dynamic) else lt,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )
