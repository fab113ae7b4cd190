"""Topics in the plan: :class:`TopicSpec` (a topic's name, format, options and declared
types) and :class:`Topic`, the bindings a config or a test gives a topology's names."""

from __future__ import annotations

from typing import Any, get_args

import attrs

from kspark._paths import resolve_path
from kspark._typing import TopicFormat, TopicLayout
from kspark.errors import InvalidArgumentError, TypeMappingError
from kspark.plan.types import TypeDesc, describe_type

__all__ = ["PATTERN_OPTION", "Topic", "TopicSpec"]

#: The option of a file ``Topic`` that reads every folder under its path whose name
#: matches the regular expression that is the topic's name (``stream(re.compile(...))``).
PATTERN_OPTION = "kspark.pattern"

#: Topic formats whose ``path`` is a folder (for ``table`` it is a table name).
_FILE_FORMATS = frozenset({"jsonl", "parquet", "csv"})


def _schema_type(tp: Any, topic: str, what: str) -> TypeDesc | None:
    """A topic's declared ``key_type`` or ``value_type`` as a type description."""
    if tp is None:
        return None
    try:
        return describe_type(tp)
    except TypeMappingError as exc:
        raise TypeMappingError(f"topic {topic!r}: {what}: {exc.message}") from exc


def _type_desc(tp: Any) -> TypeDesc | None:
    """A ``TopicSpec``'s ``key_type`` or ``value_type``: a type description, or a Python
    type to describe."""
    if tp is None or isinstance(tp, TypeDesc):
        return tp
    return describe_type(tp)


def _type_repr(tp: TypeDesc | None) -> str:
    return "None" if tp is None else tp.display()


@attrs.frozen(kw_only=True)
class TopicSpec:
    """Where a topic lives: a file directory, a Spark table, or Kafka (``kspark.Topic``).

    Build one with the class methods :meth:`jsonl`, :meth:`parquet`, :meth:`csv`,
    :meth:`table` and :meth:`kafka`.

    Parameters
    ----------
    name
        The topic's name in the topology (``describe()``, the test driver, bindings).
    format
        ``"jsonl"``, ``"parquet"`` or ``"csv"`` (a directory of files), ``"table"`` (a
        Spark table) or ``"kafka"``.
    path
        The directory of a file topic or the name of a table; None for Kafka. A relative
        or ``~`` path becomes absolute here, against the client's working directory, as
        the user meant it, before it reaches the server; a URI (``s3a://``, ``hdfs://``,
        ``file:/``) is kept as it is.
    layout
        ``"envelope"``: rows carry ``key``, ``value``, ``timestamp`` and optionally
        ``headers``, ``partition``, ``offset``. ``"value"``: each row is the value.
    key_field, timestamp_field
        With ``layout="value"``, the columns to take the key and the timestamp from.
    options
        ``(name, value)`` pairs passed to Spark's reader and writer.
    key_type, value_type
        The topic's schema, if it declares one (the factories take Python types). A source
        of the topic whose topology declares no types reads them; a sink converts dynamic
        keys and values to them, and a record that does not convert goes to the
        production exception handler under the sink's name.

    Examples
    --------
    >>> from kspark import Topic
    >>> Topic.jsonl("payments", "/data/payments")
    TopicSpec(name='payments', format='jsonl', path='/data/payments', layout='envelope', key_field=None, timestamp_field=None, options=(), key_type=None, value_type=None)
    >>> Topic.jsonl("counts", "/data/counts", value_type=int).value_type.display()
    'int'
    >>> Topic(name="rates", format="parquet", path="/data/rates", layout="value", key_field="ccy").key_field
    'ccy'
    """

    name: str
    format: TopicFormat
    path: str | None = None
    layout: TopicLayout = "envelope"
    key_field: str | None = None
    timestamp_field: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    # shown by their names: two Topics that differ only in their schema must not look alike
    # in an error message
    key_type: TypeDesc | None = attrs.field(default=None, repr=_type_repr, converter=_type_desc)
    value_type: TypeDesc | None = attrs.field(default=None, repr=_type_repr, converter=_type_desc)

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise InvalidArgumentError("a topic needs a name", parameter="name")
        if self.format not in get_args(TopicFormat):
            raise InvalidArgumentError(
                f"topic {self.name!r}: unknown format {self.format!r}", parameter="format"
            )
        if self.format != "kafka" and not self.path:
            raise InvalidArgumentError(
                f"topic {self.name!r}: a {self.format} topic needs a path or table name",
                parameter="path",
            )
        if self.format in _FILE_FORMATS and self.path is not None:
            # resolved here, not on the server, whose working directory is not the user's
            object.__setattr__(self, "path", resolve_path(self.path))
        if self.layout not in get_args(TopicLayout):
            raise InvalidArgumentError(
                f"topic {self.name!r}: layout must be 'envelope' or 'value', not {self.layout!r}",
                parameter="layout",
            )
        if self.layout == "envelope" and (self.key_field or self.timestamp_field):
            raise InvalidArgumentError(
                f"topic {self.name!r}: key_field and timestamp_field need layout='value'",
                parameter="layout",
            )

    def option_dict(self) -> dict[str, str]:
        """``options`` as a dict.

        Returns
        -------
        dict
            Option name to value.

        Examples
        --------
        >>> Topic.kafka("t", bootstrap_servers="k:9092", startingOffsets="latest").option_dict()
        {'kafka.bootstrap.servers': 'k:9092', 'startingOffsets': 'latest'}
        """
        return dict(self.options)

    @classmethod
    def jsonl(
        cls,
        name: str,
        path: str,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of JSON-lines files.

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.jsonl("payments", "/data/payments", layout="value", key_field="account").format
        'jsonl'
        """
        return cls(
            name=name,
            format="jsonl",
            path=path,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def parquet(
        cls,
        name: str,
        path: str,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of Parquet files.

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.parquet("rates", "/lake/rates", layout="value", key_field="currency").layout
        'value'
        """
        return cls(
            name=name,
            format="parquet",
            path=path,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def csv(
        cls,
        name: str,
        path: str,
        *,
        key_field: str | None = None,
        timestamp_field: str | None = None,
        header: bool = True,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of CSV files; each row is a value (``layout='value'``).

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        key_field, timestamp_field
            The columns to take the key and the timestamp from.
        header
            Whether the files' first line names the columns.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.csv("trades", "/data/trades", key_field="symbol").option_dict()
        {'header': 'true'}
        """
        return cls(
            name=name,
            format="csv",
            path=path,
            layout="value",
            key_field=key_field,
            timestamp_field=timestamp_field,
            options=(("header", str(header).lower()),),
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def table(
        cls,
        name: str,
        table_name: str | None = None,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A Spark table (``spark.readStream.table``), by default the table named ``name``.

        Parameters
        ----------
        name
            The topic's name in the topology.
        table_name
            The Spark table's name; None: ``name``.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.table("orders", "sales.orders").path
        'sales.orders'
        """
        return cls(
            name=name,
            format="table",
            path=table_name or name,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def kafka(
        cls,
        name: str,
        bootstrap_servers: str,
        *,
        key_type: Any = None,
        value_type: Any = None,
        **options: str,
    ) -> TopicSpec:
        """A Kafka topic.

        Parameters
        ----------
        name
            The Kafka topic's name, which is also its name in the topology.
        bootstrap_servers
            The cluster, ``host:port[,host:port...]``.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.
        **options
            Passed through to Spark's Kafka source or sink (``startingOffsets``, ...).

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> t = Topic.kafka("payments", bootstrap_servers="localhost:9092", startingOffsets="earliest")
        >>> t.option_dict()["kafka.bootstrap.servers"]
        'localhost:9092'
        """
        opts = {"kafka.bootstrap.servers": bootstrap_servers, **options}
        return cls(
            name=name,
            format="kafka",
            options=tuple(sorted(opts.items())),
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )


#: The public name of :class:`TopicSpec`.
Topic = TopicSpec
