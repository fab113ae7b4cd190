"""What ``KTable.suppress`` holds back: ``Suppressed`` and its ``BufferConfig``.

``Suppressed.until_window_closes()`` keeps a windowed aggregation's updates until each
window closes and emits its final result once. ``Suppressed.until_time_limit(limit,
buffer)`` works on any table: each key's updates wait until stream time passes the time
of the key's oldest waiting update plus ``limit``, and only the latest goes out; the
buffer may be bounded, and says what a full buffer does.

Examples
--------
>>> from datetime import timedelta
>>> s = Suppressed.until_time_limit(
...     timedelta(seconds=10), BufferConfig.max_records(1000).emit_early_when_full()
... )
>>> s.time_limit_ms, s.buffer_config.max_records_, s.buffer_config.when_full
(10000, 1000, 'emit')
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

import attrs

from kspark.dsl.options import optional_name, to_ms
from kspark.errors import InvalidArgumentError

__all__ = ["BufferConfig", "Suppressed"]

WhenFull = Literal["emit", "shut_down"]


def _bound(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(
            f"{what} must be a non-negative int, got {n!r}", parameter=what.replace(" ", "_")
        )
    return n


@attrs.frozen(kw_only=True)
class BufferConfig:
    """How much a suppression's buffer may hold, and what it does when it is full.

    ``max_records(n)`` and ``max_bytes(n)`` bound it (chain ``with_max_records`` and
    ``with_max_bytes`` for both); ``unbounded()`` does not. A bounded buffer that passes
    a bound emits its oldest updates early (``emit_early_when_full()``, the default) or
    stops the app (``should_shut_down_when_full()``) with
    :class:`~kspark.errors.SuppressionBufferFullError`. An update's bytes are its key's
    and value's MessagePack bytes, its headers' and 24 bytes more (docs/aggregations.md).

    Examples
    --------
    >>> BufferConfig.unbounded()
    BufferConfig(max_records_=None, max_bytes_=None, when_full='emit')
    >>> b = BufferConfig.max_bytes(1 << 20).with_max_records(500).should_shut_down_when_full()
    >>> b.max_records_, b.max_bytes_, b.when_full
    (500, 1048576, 'shut_down')
    """

    max_records_: int | None = None
    max_bytes_: int | None = None
    when_full: WhenFull = "emit"

    @classmethod
    def unbounded(cls) -> BufferConfig:
        """A buffer without bounds (it grows with the keys that wait)."""
        return cls()

    @classmethod
    def max_records(cls, n: int) -> BufferConfig:
        """A buffer of at most ``n`` keys."""
        return cls(max_records_=_bound(n, "max records"))

    @classmethod
    def max_bytes(cls, n: int) -> BufferConfig:
        """A buffer of at most ``n`` bytes."""
        return cls(max_bytes_=_bound(n, "max bytes"))

    def with_max_records(self, n: int) -> BufferConfig:
        """A copy bounded to ``n`` keys too."""
        return attrs.evolve(self, max_records_=_bound(n, "max records"))

    def with_max_bytes(self, n: int) -> BufferConfig:
        """A copy bounded to ``n`` bytes too."""
        return attrs.evolve(self, max_bytes_=_bound(n, "max bytes"))

    def with_no_bound(self) -> BufferConfig:
        """A copy without bounds."""
        return attrs.evolve(self, max_records_=None, max_bytes_=None)

    def emit_early_when_full(self) -> BufferConfig:
        """A copy that, when full, emits its oldest updates until it fits."""
        return attrs.evolve(self, when_full="emit")

    def should_shut_down_when_full(self) -> BufferConfig:
        """A copy that, when full, stops the app with an error naming the processor."""
        return attrs.evolve(self, when_full="shut_down")

    #: Kafka Streams' name of :meth:`should_shut_down_when_full`
    shut_down_when_full = should_shut_down_when_full

    @property
    def bounded(self) -> bool:
        return self.max_records_ is not None or self.max_bytes_ is not None


@attrs.frozen(kw_only=True)
class Suppressed:
    """What ``KTable.suppress`` holds back.

    ``until_window_closes`` emits each window's final result once, when stream time
    passes its end plus grace (a windowed aggregation's table only).
    ``until_time_limit(limit, buffer)`` works on any table (see the module).

    Examples
    --------
    >>> Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final").name
    'final'
    """

    name: str | None = optional_name("name")
    #: None: until the window closes; else the time limit
    time_limit_ms: int | None = None
    buffer_config: BufferConfig = BufferConfig()

    @classmethod
    def until_window_closes(cls, buffer_config: BufferConfig | None = None) -> Suppressed:
        """Only the final result of each window of a windowed aggregation.

        Examples
        --------
        >>> Suppressed.until_window_closes().name is None
        True
        """
        if buffer_config is not None and not isinstance(buffer_config, BufferConfig):
            raise InvalidArgumentError(
                f"buffer_config must be a BufferConfig, got {buffer_config!r}",
                parameter="buffer_config",
            )
        if buffer_config is not None and buffer_config.bounded:
            raise InvalidArgumentError(
                "Suppressed.until_window_closes keeps its windows in the aggregation's "
                "store, which only BufferConfig.unbounded() describes; bound the updates "
                "with Suppressed.until_time_limit(...) instead",
                parameter="buffer_config",
            )
        return cls()

    @classmethod
    def until_time_limit(
        cls, time_to_wait_for_more_events: timedelta, buffer_config: BufferConfig
    ) -> Suppressed:
        """Each key's latest update, once stream time passes the time of its oldest
        waiting update plus ``time_to_wait_for_more_events``.

        Parameters
        ----------
        time_to_wait_for_more_events
            How long (in stream time) a key's first waiting update waits for more.
        buffer_config
            The buffer's bounds and what it does when full.

        Examples
        --------
        >>> from datetime import timedelta
        >>> Suppressed.until_time_limit(timedelta(0), BufferConfig.unbounded()).time_limit_ms
        0
        """
        ms = to_ms(time_to_wait_for_more_events, "time_to_wait_for_more_events")
        if not isinstance(buffer_config, BufferConfig):
            raise InvalidArgumentError(
                f"buffer_config must be a BufferConfig, got {buffer_config!r}",
                parameter="buffer_config",
            )
        return cls(time_limit_ms=ms, buffer_config=buffer_config)

    def with_name(self, name: str) -> Suppressed:
        """A copy whose suppression processor is named ``name``."""
        return attrs.evolve(self, name=name)
