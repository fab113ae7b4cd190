"""Options of the stream-stream join: ``JoinWindows`` and ``StreamJoined``.

``JoinWindows`` says which records of the two streams join: those of the same key whose
timestamps lie within a time difference of each other, as Kafka Streams' ``JoinWindows``
(with KIP-633's explicit grace period). ``StreamJoined`` names the join's processor and
its state store.

Examples
--------
>>> from datetime import timedelta
>>> w = JoinWindows.of_time_difference_and_grace(timedelta(seconds=5), timedelta(seconds=2))
>>> (w.before_ms, w.after_ms, w.grace)
(5000, 5000, datetime.timedelta(seconds=2))
>>> w.after(timedelta(seconds=1)).after_ms
1000
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from kspark.dsl.options import factory, optional_name, to_ms
from kspark.errors import InvalidArgumentError

__all__ = ["JoinWindows", "StreamJoined"]


def _ms(d: object) -> int:
    # before and after may be negative (an asymmetric window that lies wholly on one side);
    # to_ms refuses negatives (and what is no timedelta), so it checks the magnitude
    if isinstance(d, timedelta) and d < timedelta(0):
        return -to_ms(-d, "time_difference")
    return to_ms(d, "time_difference")


@attrs.frozen(kw_only=True)
class JoinWindows:
    """The windows of a stream-stream join (Kafka Streams' ``JoinWindows``).

    A record of the left stream at time ``t1`` joins each record of the right stream with
    the same key at time ``t2`` where ``t1 - before <= t2 <= t1 + after``. Each record's
    window closes when the join's stream time passes ``its window end + grace``
    (``t1 + after + grace`` for a left record, ``t2 + before + grace`` for a right one):
    a record that arrives after that is late, and is dropped and counted.

    Make one with :meth:`of_time_difference_with_no_grace` or
    :meth:`of_time_difference_and_grace`; :meth:`before` and :meth:`after` give a copy
    with one bound changed (either may be negative, their sum may not).

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=1))
    >>> w.before_ms, w.after_ms, w.grace_ms
    (60000, 60000, 0)
    >>> w.before(timedelta(0)).before_ms  # only right records at or after the left one
    0
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    def __attrs_post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise InvalidArgumentError(
                "a join window's before + after must not be negative (got before "
                f"{timedelta(milliseconds=self.before_ms)}, after "
                f"{timedelta(milliseconds=self.after_ms)})",
                parameter="time_difference",
            )
        if self.grace_ms < 0:
            raise InvalidArgumentError(
                "a join window's grace period must not be negative", parameter="grace"
            )

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: timedelta) -> JoinWindows:
        """Records join if their timestamps differ by at most ``time_difference``; a record
        is late as soon as its window ends (no grace period).

        Parameters
        ----------
        time_difference
            The largest difference between the two records' timestamps, not negative.

        Returns
        -------
        JoinWindows
            Symmetric windows with no grace period.

        Examples
        --------
        >>> from datetime import timedelta
        >>> JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=10))
        JoinWindows(before=0:00:10, after=0:00:10, grace=0:00:00)
        """
        return cls.of_time_difference_and_grace(time_difference, timedelta(0))

    @classmethod
    def of_time_difference_and_grace(
        cls, time_difference: timedelta, grace: timedelta
    ) -> JoinWindows:
        """Records join if their timestamps differ by at most ``time_difference``; a record
        is accepted until the join's stream time passes its window's end plus ``grace``
        (KIP-633).

        Parameters
        ----------
        time_difference
            The largest difference between the two records' timestamps, not negative.
        grace
            How long after a window's end out-of-order records are still accepted.

        Returns
        -------
        JoinWindows
            Symmetric windows with that grace period.

        Examples
        --------
        >>> from datetime import timedelta
        >>> JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=3))
        JoinWindows(before=0:00:10, after=0:00:10, grace=0:00:03)
        """
        d, g = to_ms(time_difference, "time_difference"), to_ms(grace, "grace")
        return cls(before_ms=d, after_ms=d, grace_ms=g)

    def before(self, time_difference: timedelta) -> JoinWindows:
        """A copy in which a left record at ``t1`` joins right records from
        ``t1 - time_difference`` on (Kafka Streams' ``JoinWindows.before``).

        Parameters
        ----------
        time_difference
            How far before the left record the window starts; negative moves the start
            after it (``before + after`` must stay at least zero).

        Returns
        -------
        JoinWindows
            The windows with ``after`` and the grace period kept.

        Examples
        --------
        >>> from datetime import timedelta
        >>> JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=10)).before(timedelta(0))
        JoinWindows(before=0:00:00, after=0:00:10, grace=0:00:00)
        """
        d = _ms(time_difference)
        return attrs.evolve(self, before_ms=d)

    def after(self, time_difference: timedelta) -> JoinWindows:
        """A copy in which a left record at ``t1`` joins right records up to
        ``t1 + time_difference`` (Kafka Streams' ``JoinWindows.after``).

        Parameters
        ----------
        time_difference
            How far after the left record the window ends; negative moves the end before
            it (``before + after`` must stay at least zero).

        Returns
        -------
        JoinWindows
            The windows with ``before`` and the grace period kept.

        Examples
        --------
        >>> from datetime import timedelta
        >>> JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=10)).after(timedelta(0))
        JoinWindows(before=0:00:10, after=0:00:00, grace=0:00:00)
        """
        d = _ms(time_difference)
        return attrs.evolve(self, after_ms=d)

    @property
    def grace(self) -> timedelta:
        """The grace period."""
        return timedelta(milliseconds=self.grace_ms)

    def __repr__(self) -> str:
        return (
            f"JoinWindows(before={timedelta(milliseconds=self.before_ms)}, "
            f"after={timedelta(milliseconds=self.after_ms)}, grace={self.grace})"
        )


@attrs.frozen(kw_only=True)
class StreamJoined:
    """Names of a stream-stream join: its processor and its state store (Kafka Streams'
    ``StreamJoined``). Both are generated when not given; give a store name to keep the
    join's state across topology changes.

    Parameters
    ----------
    name
        The join processor's name; None generates one.
    store_name
        The name of the store that buffers both streams' records; None generates one.

    Examples
    --------
    >>> StreamJoined.as_("clicks-with-views").with_name("join-views")
    StreamJoined(name='join-views', store_name='clicks-with-views')
    """

    name: str | None = optional_name("StreamJoined name")
    store_name: str | None = optional_name("StreamJoined store name")

    @factory
    def as_(self, store_name: str) -> StreamJoined:
        """A copy whose store is named ``store_name``, as Kafka Streams' ``StreamJoined.as``.

        Parameters
        ----------
        store_name
            The state store's name.

        Returns
        -------
        StreamJoined
            The option object, with its processor name kept.

        Examples
        --------
        >>> StreamJoined.as_("views-buffer").store_name
        'views-buffer'
        >>> StreamJoined.with_name("j").with_store_name("s")
        StreamJoined(name='j', store_name='s')
        """
        return attrs.evolve(self, store_name=store_name)

    #: the same as :meth:`as_`, in the words of the other option classes
    with_store_name = as_

    @factory
    def with_name(self, name: str) -> StreamJoined:
        """A copy whose join processor is named ``name``.

        Parameters
        ----------
        name
            The processor's name.

        Returns
        -------
        StreamJoined
            The option object, with its store name kept.

        Examples
        --------
        >>> StreamJoined.with_name("join-views").name
        'join-views'
        """
        return attrs.evolve(self, name=name)
