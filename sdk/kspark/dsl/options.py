"""Immutable option objects of the DSL: ``Named``, ``Materialized``, ``Joined``,
``Deduplicated``, ``Branched`` and ``Repartitioned``.

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

from datetime import timedelta

import attrs

from kspark.errors import InvalidArgumentError

__all__ = ["Branched", "Deduplicated", "Joined", "Materialized", "Named", "Repartitioned"]


def _valid_name(value: object, what: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")


def to_ms(d: timedelta, what: str, *, allow_zero: bool = True) -> int:
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
    """A processor name chosen by the user instead of the generated one."""

    name: str = attrs.field(validator=lambda _i, _a, v: _valid_name(v, "Named name"))

    @classmethod
    def as_(cls, name: str) -> Named:
        return cls(name)


@attrs.frozen(kw_only=True)
class Branched:
    """Names one branch of :meth:`KStream.split`."""

    name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "branch name")
    )

    @classmethod
    def as_(cls, name: str) -> Branched:
        return cls(name=name)


@attrs.frozen(kw_only=True)
class Repartitioned:
    """Options of :meth:`KStream.repartition`: a name and the number of partitions."""

    name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "Repartitioned name")
    )
    num_partitions: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.num_partitions is not None and self.num_partitions < 1:
            raise InvalidArgumentError(
                f"num_partitions must be at least 1, got {self.num_partitions}",
                parameter="num_partitions",
            )

    @classmethod
    def as_(cls, name: str) -> Repartitioned:
        return cls(name=name)

    @classmethod
    def with_num_partitions(cls, n: int) -> Repartitioned:
        return cls(num_partitions=n)


@attrs.frozen(kw_only=True)
class Materialized:
    """How a KTable is stored: a latest-value store or a versioned store (KIP-889)."""

    store_name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "store name")
    )
    versioned: bool = False
    history_retention: timedelta | None = None
    segment_interval: timedelta | None = None

    def __attrs_post_init__(self) -> None:
        if self.versioned:
            if self.history_retention is None:
                raise InvalidArgumentError(
                    "a versioned store needs history_retention", parameter="history_retention"
                )
            to_ms(self.history_retention, "history_retention")
            if self.segment_interval is not None:
                to_ms(self.segment_interval, "segment_interval", allow_zero=False)

    @classmethod
    def as_(cls, store_name: str) -> Materialized:
        """A latest-value store named ``store_name``."""
        return cls(store_name=store_name)

    @classmethod
    def as_versioned(
        cls,
        store_name: str,
        history_retention: timedelta,
        segment_interval: timedelta | None = None,
    ) -> Materialized:
        """A versioned store that keeps ``history_retention`` of history.

        A stream joined with a versioned table sees the table value as of each stream
        record's timestamp (KIP-914).

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
        return cls(
            store_name=store_name,
            versioned=True,
            history_retention=history_retention,
            segment_interval=segment_interval,
        )

    def with_store_name(self, store_name: str) -> Materialized:
        return attrs.evolve(self, store_name=store_name)


@attrs.frozen(kw_only=True)
class Joined:
    """Options of a stream-table join: a processor name and a grace period (KIP-923)."""

    name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "Joined name")
    )
    grace_period: timedelta | None = None

    def __attrs_post_init__(self) -> None:
        if self.grace_period is not None:
            to_ms(self.grace_period, "grace_period")

    @classmethod
    def as_(cls, name: str) -> Joined:
        return cls(name=name)

    def with_name(self, name: str) -> Joined:
        return attrs.evolve(self, name=name)

    def with_grace_period(self, grace: timedelta) -> Joined:
        """A copy with a grace period (KIP-923): a stream record is joined once the join's
        stream time reaches its timestamp plus ``grace``, so that late table updates are
        seen. Needs a versioned table; a zero grace period means none.

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

    name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "Deduplicated name")
    )
    store_name: str | None = attrs.field(
        default=None, validator=lambda _i, _a, v: _valid_name(v, "store name")
    )

    @classmethod
    def as_(cls, name: str) -> Deduplicated:
        return cls(name=name)

    def with_name(self, name: str) -> Deduplicated:
        return attrs.evolve(self, name=name)

    def with_store_name(self, store_name: str) -> Deduplicated:
        return attrs.evolve(self, store_name=store_name)
