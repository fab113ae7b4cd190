"""Windows of grouped streams: ``TimeWindows`` (tumbling and hopping),
``SessionWindows``, ``SlidingWindows`` (KIP-450), and when a windowed aggregation emits,
``EmitStrategy`` (KIP-825). Each checks its sizes when made and gives the plan its
definition (:mod:`kspark.plan.grouped`).

Examples
--------
>>> from datetime import timedelta
>>> TimeWindows.of_size_with_no_grace(timedelta(minutes=1)).spec()
TimeWindowsDef(size_ms=60000, advance_ms=60000, grace_ms=0)
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from kspark.dsl.options import to_ms
from kspark.plan.grouped import SessionWindowsDef, SlidingWindowsDef, TimeWindowsDef

__all__ = ["EmitStrategy", "SessionWindows", "SlidingWindows", "TimeWindows"]


@attrs.frozen(kw_only=True)
class _Windows:
    """What time and session windows share: a grace period, checked when made."""

    grace: timedelta

    def __attrs_post_init__(self) -> None:
        self.spec()

    @property
    def grace_ms(self) -> int:
        return to_ms(self.grace, "grace")

    def spec(self) -> TimeWindowsDef | SessionWindowsDef | SlidingWindowsDef:
        """The windows as the plan holds them."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class TimeWindows(_Windows):
    """Fixed-size time windows: tumbling, or hopping with :meth:`advance_by`.

    A window covers ``[start, start + size)`` (epoch ms); starts are multiples of the
    advance. A record is added to every window that contains its timestamp, unless stream
    time has passed that window's end plus the grace period: then it is late for it,
    dropped and counted (``dropped-records``).

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = TimeWindows.of_size_and_grace(timedelta(minutes=5), timedelta(seconds=30))
    >>> w.size_ms, w.advance_ms, w.grace_ms
    (300000, 300000, 30000)
    >>> w.advance_by(timedelta(minutes=1)).advance_ms
    60000
    """

    size: timedelta
    advance: timedelta

    @classmethod
    def of_size_with_no_grace(cls, size: timedelta) -> TimeWindows:
        """Tumbling windows of ``size``; a record later than its window's end is dropped.

        Examples
        --------
        >>> from datetime import timedelta
        >>> TimeWindows.of_size_with_no_grace(timedelta(minutes=1)).grace_ms
        0
        """
        return cls(size=size, advance=size, grace=timedelta(0))

    @classmethod
    def of_size_and_grace(cls, size: timedelta, grace: timedelta) -> TimeWindows:
        """Tumbling windows of ``size`` that take records up to ``grace`` after their end.

        Examples
        --------
        >>> from datetime import timedelta
        >>> TimeWindows.of_size_and_grace(timedelta(minutes=1), timedelta(seconds=10)).grace_ms
        10000
        """
        return cls(size=size, advance=size, grace=grace)

    def advance_by(self, advance: timedelta) -> TimeWindows:
        """Hopping windows: a new window every ``advance`` (at most the size).

        Examples
        --------
        >>> from datetime import timedelta
        >>> w = TimeWindows.of_size_with_no_grace(timedelta(minutes=10)).advance_by(timedelta(minutes=5))
        >>> w.size_ms, w.advance_ms
        (600000, 300000)
        """
        return attrs.evolve(self, advance=advance)

    @property
    def size_ms(self) -> int:
        return to_ms(self.size, "size", allow_zero=False)

    @property
    def advance_ms(self) -> int:
        return to_ms(self.advance, "advance", allow_zero=False)

    def spec(self) -> TimeWindowsDef:
        return TimeWindowsDef(
            size_ms=self.size_ms, advance_ms=self.advance_ms, grace_ms=self.grace_ms
        )


@attrs.frozen(kw_only=True)
class SessionWindows(_Windows):
    """Session windows: a key's records less than the inactivity gap apart share one
    session, which grows (and merges with its neighbours) as records come.

    A session's window runs from its first to its last record's timestamp, both included
    (``Windowed.window.end`` is the last record's time, as in Kafka Streams). A record whose
    session would end before stream time minus the grace period is late: dropped and
    counted.

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), timedelta(seconds=30))
    >>> w.gap_ms, w.grace_ms
    (300000, 30000)
    """

    gap: timedelta

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, gap: timedelta) -> SessionWindows:
        """Sessions that end after ``gap`` without a record; no late records.

        Examples
        --------
        >>> from datetime import timedelta
        >>> SessionWindows.of_inactivity_gap_with_no_grace(timedelta(minutes=5)).grace_ms
        0
        """
        return cls(gap=gap, grace=timedelta(0))

    @classmethod
    def of_inactivity_gap_and_grace(cls, gap: timedelta, grace: timedelta) -> SessionWindows:
        """Sessions that end after ``gap`` without a record, taking late records for
        ``grace``."""
        return cls(gap=gap, grace=grace)

    @property
    def gap_ms(self) -> int:
        return to_ms(self.gap, "gap", allow_zero=False)

    def spec(self) -> SessionWindowsDef:
        return SessionWindowsDef(gap_ms=self.gap_ms, grace_ms=self.grace_ms)


@attrs.frozen(kw_only=True)
class SlidingWindows(_Windows):
    """Sliding windows (KIP-450): windows of a fixed time difference that slide with the
    records, both ends included.

    For each record at ``t`` a key has the window ``[t - d, t]`` (``d`` the time
    difference) and, once a later record falls into it, the window ``[t + 1, t + 1 + d]``;
    so every distinct set of a key's records at most ``d`` apart has one window, and no
    window is empty. A record updates every window that contains it; a record that no
    open window can take (its time plus ``d`` is before stream time minus grace) is
    dropped and counted, and so is each closed window a record misses. A record earlier
    than ``d`` (epoch ms) goes into the window ``[0, d]``, as in Kafka Streams.

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = SlidingWindows.of_time_difference_and_grace(timedelta(minutes=5), timedelta(seconds=30))
    >>> w.size_ms, w.grace_ms
    (300000, 30000)
    """

    time_difference: timedelta

    @classmethod
    def of_time_difference_without_a_grace(cls, time_difference: timedelta) -> SlidingWindows:
        """Sliding windows of ``time_difference``; a window takes no record once stream
        time has passed its end.

        Examples
        --------
        >>> from datetime import timedelta
        >>> SlidingWindows.of_time_difference_without_a_grace(timedelta(seconds=10)).grace_ms
        0
        """
        return cls(time_difference=time_difference, grace=timedelta(0))

    @classmethod
    def of_time_difference_and_grace(
        cls, time_difference: timedelta, after_window_end: timedelta
    ) -> SlidingWindows:
        """Sliding windows of ``time_difference`` that take records up to
        ``after_window_end`` after their end.

        Examples
        --------
        >>> from datetime import timedelta
        >>> w = SlidingWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=2))
        >>> w.size_ms, w.grace_ms
        (10000, 2000)
        """
        return cls(time_difference=time_difference, grace=after_window_end)

    @property
    def size_ms(self) -> int:
        return to_ms(self.time_difference, "time_difference", allow_zero=False)

    def spec(self) -> SlidingWindowsDef:
        return SlidingWindowsDef(size_ms=self.size_ms, grace_ms=self.grace_ms)


@attrs.frozen
class EmitStrategy:
    """When a windowed aggregation emits (KIP-825): ``on_window_update()`` (the default)
    each window's latest value per micro-batch, ``on_window_close()`` each window's final
    value once, when stream time passes its end plus grace.

    Examples
    --------
    >>> EmitStrategy.on_window_close().on_close
    True
    >>> EmitStrategy.on_window_update().on_close
    False
    """

    on_close: bool = False

    @classmethod
    def on_window_close(cls) -> EmitStrategy:
        """Each window's final result once, when it closes (no updates before)."""
        return cls(on_close=True)

    @classmethod
    def on_window_update(cls) -> EmitStrategy:
        """Each window's latest value whenever a micro-batch changes it (the default)."""
        return cls(on_close=False)
