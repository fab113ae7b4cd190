"""Immutable option objects of the DSL: ``Named``, ``Materialized``, ``Joined``,
``Deduplicated``, ``Branched``, ``Repartitioned`` and ``Grouped``.

Each is a frozen value. ``as_()`` makes one and ``with_*()`` returns a changed copy, so an
option object can be shared safely.

Examples
--------
>>> from datetime import timedelta
>>> d = Deduplicated.as_("dedup-payments").with_store_name("payments-seen")
>>> (d.name, d.store_name)
('dedup-payments', 'payments-seen')
>>> Materialized.as_versioned("rates", history_retention=timedelta(days=1)).versioned
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import attrs

from kspark.errors import InvalidArgumentError

__all__ = [
    "Branched",
    "Deduplicated",
    "Grouped",
    "Joined",
    "Materialized",
    "Named",
    "Repartitioned",
]

_O = TypeVar("_O")
_P = ParamSpec("_P")


class factory(Generic[_O, _P]):
    """A method that is also a static factory, as Kafka Streams' option classes have both.

    On an instance, ``opts.with_x(...)`` is a copy of ``opts`` with ``x`` changed. On the
    class, ``Options.with_x(...)`` is the same call on the default ``Options()``. So
    ``Joined.with_grace_period(d)`` and ``Joined.as_("j").with_grace_period(d)`` both work,
    and the second keeps the name. mypy sees both forms as the method's own signature.

    Examples
    --------
    >>> Repartitioned.with_num_partitions(4)
    Repartitioned(name=None, num_partitions=4)
    >>> Repartitioned.as_("r").with_num_partitions(4)
    Repartitioned(name='r', num_partitions=4)
    """

    def __init__(self, fn: Callable[Concatenate[_O, _P], _O]) -> None:
        self._fn = fn
        # what doctest, help() and the API docs read from a method
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    @overload
    def __get__(self, obj: None, owner: type[_O]) -> Callable[_P, _O]: ...

    @overload
    def __get__(self, obj: _O, owner: type[_O] | None = None) -> Callable[_P, _O]: ...

    def __get__(self, obj: _O | None, owner: type[_O] | None = None) -> Callable[_P, _O]:
        if obj is None:
            assert owner is not None
            obj = owner()
        target: _O = obj

        @functools.wraps(self._fn)
        def bound(*args: _P.args, **kwargs: _P.kwargs) -> _O:
            return self._fn(target, *args, **kwargs)

        return bound


def _valid_name(value: object, what: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")


def optional_name(what: str) -> Any:
    """An attrs field for an optional name: None (generated later) or a non-empty string;
    ``what`` names it in the error.

    Examples
    --------
    >>> Deduplicated(store_name=" ")
    Traceback (most recent call last):
    ...
    kspark.errors.InvalidArgumentError: [KSPARK_INVALID_ARGUMENT] store name must be a non-empty string, got ' '
    """
    return attrs.field(default=None, validator=lambda _i, _a, v: _valid_name(v, what))


def to_ms(d: object, what: str, *, allow_zero: bool = True) -> int:
    """A non-negative :class:`~datetime.timedelta` in whole milliseconds."""
    if not isinstance(d, timedelta):
        raise InvalidArgumentError(
            f"{what} must be a datetime.timedelta, got {type(d).__name__}", parameter=what
        )
    ms = d // timedelta(milliseconds=1)
    if ms < 0 or (ms == 0 and not allow_zero):
        raise InvalidArgumentError(
            f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {d}",
            parameter=what,
        )
    return ms


@attrs.frozen
class Named:
    """A processor name chosen by the user instead of the generated one.

    Parameters
    ----------
    name
        The processor's name, non-empty; it shows in ``describe()``, metrics and errors.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> s = StreamsBuilder().stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    >>> s.filter(lambda k, v: v > 0, Named.as_("positive")).name
    'positive'
    """

    name: str = attrs.field(validator=lambda _i, _a, v: _valid_name(v, "Named name"))

    # a classmethod, not a factory: a Named holds nothing but its name, so there is
    # nothing for an instance to keep (and no default Named to start from)
    @classmethod
    def as_(cls, name: str) -> Named:
        """A ``Named`` with ``name``.

        Parameters
        ----------
        name
            The processor's name.

        Returns
        -------
        Named
            The option object.

        Examples
        --------
        >>> Named.as_("positive")
        Named(name='positive')
        """
        return cls(name)


@attrs.frozen(kw_only=True)
class Branched:
    """Names one branch of :meth:`KStream.split`.

    Parameters
    ----------
    name
        The branch's name, which follows the split's name in the dict of branches; None
        numbers the branch.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> s = StreamsBuilder().stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    >>> branches = (
    ...     s.split(Named.as_("sign-"))
    ...     .branch(lambda k, v: v < 0, Branched.as_("negative"))
    ...     .default_branch(Branched.as_("other"))
    ... )
    >>> sorted(branches)
    ['sign-negative', 'sign-other']
    """

    name: str | None = optional_name("branch name")

    @factory
    def as_(self, name: str) -> Branched:
        """A copy named ``name`` (on the class: a new ``Branched``).

        Parameters
        ----------
        name
            The branch's name.

        Returns
        -------
        Branched
            The option object.

        Examples
        --------
        >>> Branched.as_("negative")
        Branched(name='negative')
        """
        return attrs.evolve(self, name=name)


@attrs.frozen(kw_only=True)
class Repartitioned:
    """Options of :meth:`KStream.repartition`: a name and the number of partitions.

    Parameters
    ----------
    name
        The repartition processor's name; None generates one.
    num_partitions
        How many tasks the records are spread over, at least 1; None uses the app's
        ``StreamsConfig.num_partitions``.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> s = StreamsBuilder().stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    >>> r = s.repartition(Repartitioned.as_("by-key").with_num_partitions(4))
    >>> r.name, r.node.num_partitions
    ('by-key', 4)
    """

    name: str | None = optional_name("Repartitioned name")
    num_partitions: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.num_partitions is not None and self.num_partitions < 1:
            raise InvalidArgumentError(
                f"num_partitions must be at least 1, got {self.num_partitions}",
                parameter="num_partitions",
            )

    @factory
    def as_(self, name: str) -> Repartitioned:
        """A copy named ``name`` (on the class: a new ``Repartitioned``).

        Parameters
        ----------
        name
            The repartition processor's name.

        Returns
        -------
        Repartitioned
            The option object, with its other settings kept.

        Examples
        --------
        >>> Repartitioned.with_num_partitions(8).as_("by-key")
        Repartitioned(name='by-key', num_partitions=8)
        """
        return attrs.evolve(self, name=name)

    @factory
    def with_num_partitions(self, num_partitions: int) -> Repartitioned:
        """A copy that spreads records over ``num_partitions`` tasks (on the class: a new
        ``Repartitioned``).

        Parameters
        ----------
        num_partitions
            The number of tasks, at least 1.

        Returns
        -------
        Repartitioned
            The option object, with its name kept.

        Examples
        --------
        >>> Repartitioned.as_("by-key").with_num_partitions(4)
        Repartitioned(name='by-key', num_partitions=4)
        """
        return attrs.evolve(self, num_partitions=num_partitions)


@attrs.frozen(kw_only=True)
class Grouped:
    """Options of ``group_by_key`` and ``group_by``: the grouping's name (in Kafka
    Streams, its repartition topic's).

    Examples
    --------
    >>> Grouped.as_("by-user")
    Grouped(name='by-user')
    """

    name: str | None = optional_name("name")

    @factory
    def as_(self, name: str) -> Grouped:
        """A ``Grouped`` named ``name``.

        Examples
        --------
        >>> Grouped.as_("by-user").name
        'by-user'
        """
        return attrs.evolve(self, name=name)

    @factory
    def with_name(self, name: str) -> Grouped:
        """A copy named ``name``.

        Examples
        --------
        >>> Grouped().with_name("g").name
        'g'
        """
        return attrs.evolve(self, name=name)


@attrs.frozen(kw_only=True)
class Materialized:
    """How a KTable is stored: a latest-value store or a versioned store (KIP-889).

    Parameters
    ----------
    store_name
        The store's name (``app.store(name)`` reads it); None generates one.
    versioned
        Whether the store keeps each key's past versions, so that a join reads the
        value as of each stream record's timestamp.
    history_retention
        How far back a versioned store keeps versions; needed when ``versioned``, and at
        least the grace period of any join against the table.
    retention
        How long a windowed aggregation's store keeps each window after its start (a
        session after its end), closed ones included (:meth:`with_retention`); None: until
        the window closes.

    Examples
    --------
    >>> from datetime import timedelta
    >>> Materialized.as_("rates")
    Materialized(store_name='rates', versioned=False, history_retention=None)
    >>> Materialized.as_versioned("rates", timedelta(hours=1)).versioned
    True
    """

    store_name: str | None = optional_name("store name")
    versioned: bool = False
    history_retention: timedelta | None = None
    retention: timedelta | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.versioned:
            if self.history_retention is None:
                raise InvalidArgumentError(
                    "a versioned store needs history_retention", parameter="history_retention"
                )
            to_ms(self.history_retention, "history_retention")

    def with_retention(self, retention: timedelta) -> Materialized:
        """A copy whose windowed store keeps each window for ``retention`` after its
        start, so that ``fetch`` still answers closed windows (Kafka Streams' window
        store retention); a session store keeps each session for ``retention`` after
        its end. It must be at least the windows' size plus grace (sliding windows:
        twice the time difference plus grace; session windows: the inactivity gap plus
        grace).

        Parameters
        ----------
        retention
            How long a window stays in the store, from its start (a session: from its
            end).

        Returns
        -------
        Materialized
            The option object with the retention.

        Examples
        --------
        >>> from datetime import timedelta
        >>> Materialized.as_("counts").with_retention(timedelta(days=7)).retention_ms
        604800000
        """
        to_ms(retention, "retention", allow_zero=False)
        return attrs.evolve(self, retention=retention)

    @property
    def retention_ms(self) -> int:
        """The retention in ms; 0 when none was given."""
        return 0 if self.retention is None else to_ms(self.retention, "retention")

    @factory
    def as_(self, store_name: str) -> Materialized:
        """A copy whose store is named ``store_name`` (on the class: a new latest-value
        store of that name).

        Parameters
        ----------
        store_name
            The store's name.

        Returns
        -------
        Materialized
            The option object, versioned or not as before.

        Examples
        --------
        >>> Materialized.as_("rates").store_name
        'rates'
        """
        return attrs.evolve(self, store_name=store_name)

    @factory
    def as_versioned(self, store_name: str, history_retention: timedelta) -> Materialized:
        """A versioned store named ``store_name`` that keeps ``history_retention`` of history.

        A stream joined with a versioned table sees the table value as of each stream
        record's timestamp (KIP-914).

        Parameters
        ----------
        store_name
            The store's name.
        history_retention
            How far back versions are kept, not negative.

        Returns
        -------
        Materialized
            The option object.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, Topic
        >>> m = Materialized.as_versioned("rates", history_retention=timedelta(days=1))
        >>> m.store_name, m.versioned, m.history_retention
        ('rates', True, datetime.timedelta(days=1))
        >>> table = StreamsBuilder().table(
        ...     Topic.jsonl("rates", "/tmp/rates"), key_type=str, value_type=float, materialized=m
        ... )
        >>> table.store_name
        'rates'
        """
        return attrs.evolve(
            self, store_name=store_name, versioned=True, history_retention=history_retention
        )

    @factory
    def with_store_name(self, store_name: str) -> Materialized:
        """A copy whose store is named ``store_name``.

        Parameters
        ----------
        store_name
            The store's name.

        Returns
        -------
        Materialized
            The option object, with its other settings kept.

        Examples
        --------
        >>> from datetime import timedelta
        >>> m = Materialized.as_versioned("rates", timedelta(hours=1)).with_store_name("fx")
        >>> m.store_name, m.versioned
        ('fx', True)
        """
        return attrs.evolve(self, store_name=store_name)


@attrs.frozen(kw_only=True)
class Joined:
    """Options of a stream-table join: a processor name and a grace period (KIP-923).

    Parameters
    ----------
    name
        The join processor's name; None generates one.
    grace_period
        How long a stream record waits for late table updates (needs a versioned table
        whose history retention is at least this long); None or zero means no wait.

    Examples
    --------
    >>> from datetime import timedelta
    >>> Joined.as_("convert").with_grace_period(timedelta(seconds=30))
    Joined(name='convert', grace_period=datetime.timedelta(seconds=30))
    """

    name: str | None = optional_name("Joined name")
    grace_period: timedelta | None = None

    def __attrs_post_init__(self) -> None:
        if self.grace_period is not None:
            to_ms(self.grace_period, "grace_period")

    @factory
    def as_(self, name: str) -> Joined:
        """A copy named ``name`` (on the class: a new ``Joined``).

        Parameters
        ----------
        name
            The join processor's name.

        Returns
        -------
        Joined
            The option object, with its grace period kept.

        Examples
        --------
        >>> Joined.as_("convert")
        Joined(name='convert', grace_period=None)
        """
        return attrs.evolve(self, name=name)

    #: Kafka Streams' name for :meth:`as_`
    with_name = as_

    @factory
    def with_grace_period(self, grace: timedelta) -> Joined:
        """A copy with a grace period (KIP-923): a stream record is joined once the join's
        stream time reaches its timestamp plus ``grace``, so that late table updates are
        seen. Needs a versioned table whose history retention is at least ``grace``; a
        zero grace period means none.

        Parameters
        ----------
        grace
            The grace period, not negative.

        Returns
        -------
        Joined
            The option object, with its name kept.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, Topic
        >>> j = Joined.as_("convert").with_grace_period(timedelta(seconds=30))
        >>> j.name, j.grace_period
        ('convert', datetime.timedelta(seconds=30))
        >>> b = StreamsBuilder()
        >>> latest = b.table(Topic.jsonl("rates", "/tmp/rates"), key_type=str, value_type=float)
        >>> s = b.stream(Topic.jsonl("payments", "/tmp/payments"), key_type=str, value_type=float)
        >>> s.join(latest, lambda amount, rate: amount * rate, j)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kspark.errors.InvalidTopologyError: [KSPARK_INVALID_TOPOLOGY] convert: Joined.with_grace_period needs a versioned table; ...
        """
        return attrs.evolve(self, grace_period=grace)


@attrs.frozen(kw_only=True)
class Deduplicated:
    """Options of the deduplication operators (KIP-655): processor and store names.

    Parameters
    ----------
    name
        The processor's name; None generates one.
    store_name
        The name of the store of seen records; None generates one.

    Examples
    --------
    >>> from datetime import timedelta
    >>> from kspark import StreamsBuilder, Topic
    >>> s = StreamsBuilder().stream(Topic.jsonl("t", "/tmp/t"), key_type=str, value_type=int)
    >>> d = s.deduplicate_by_key(
    ...     timedelta(minutes=5), Deduplicated.as_("dedup").with_store_name("dedup-seen")
    ... )
    >>> d.name, d.node.stores()
    ('dedup', ('dedup-seen',))
    """

    name: str | None = optional_name("Deduplicated name")
    store_name: str | None = optional_name("store name")

    @factory
    def as_(self, name: str) -> Deduplicated:
        """A copy named ``name`` (on the class: a new ``Deduplicated``).

        Parameters
        ----------
        name
            The processor's name.

        Returns
        -------
        Deduplicated
            The option object, with its store name kept.

        Examples
        --------
        >>> Deduplicated.with_store_name("seen").as_("dedup")
        Deduplicated(name='dedup', store_name='seen')
        """
        return attrs.evolve(self, name=name)

    #: Kafka Streams' name for :meth:`as_`
    with_name = as_

    @factory
    def with_store_name(self, store_name: str) -> Deduplicated:
        """A copy whose store of seen records is named ``store_name``.

        Parameters
        ----------
        store_name
            The store's name.

        Returns
        -------
        Deduplicated
            The option object, with its name kept.

        Examples
        --------
        >>> Deduplicated.as_("dedup").with_store_name("seen")
        Deduplicated(name='dedup', store_name='seen')
        """
        return attrs.evolve(self, store_name=store_name)
