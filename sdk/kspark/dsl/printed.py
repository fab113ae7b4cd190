"""``Printed``: where and how :meth:`kspark.KStream.print` prints, as in Kafka Streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from kspark._paths import resolve_path
from kspark.errors import InvalidArgumentError

__all__ = ["Printed"]

K = TypeVar("K")
V = TypeVar("V")
KR = TypeVar("KR")
VR = TypeVar("VR")


@attrs.frozen(kw_only=True)
class Printed(Generic[K, V]):
    """Where :meth:`KStream.print <kspark.KStream.print>` writes its lines, and their form.

    Each record becomes one line, ``[label]: key, value``; the label is the processor's
    name unless :meth:`with_label` gives one, and :meth:`with_key_value_mapper` replaces
    ``key, value`` by what it makes of the record. Lines are written where records are
    processed, in the Spark executors' Python workers: see :meth:`to_sysout` and
    :meth:`to_file`.

    Examples
    --------
    >>> from kspark import Printed
    >>> p = Printed.to_sysout().with_label("orders")
    >>> p.label, p.file_path
    ('orders', None)
    """

    file_path: str | None = None
    label: str | None = None
    mapper: Callable[[Any, Any], object] | None = None
    name: str | None = None

    @classmethod
    def to_sysout(cls) -> Printed[Any, Any]:
        """Print to standard output.

        On a cluster that is each executor's standard output (its log). The embedded
        server's executors are the server's process, whose output goes to the server's
        log; :class:`~kspark.testing.TopologyTestDriver` shows the lines on the test's own
        ``sys.stdout`` after each micro-batch.

        Returns
        -------
        Printed
            The option object.

        Examples
        --------
        >>> Printed.to_sysout().file_path is None
        True
        """
        return Printed()

    @classmethod
    def to_file(cls, file_path: str) -> Printed[Any, Any]:
        """Append the lines to the file ``file_path``.

        A relative or ``~`` path is made absolute here, against the client's working
        directory, as a file topic's is. The file is on each executor's machine: with the
        embedded server (or one on this machine) that is the client's file; on a cluster
        each executor appends to its own. Lines are appended, so a restarted app adds to
        what the file holds.

        Parameters
        ----------
        file_path
            The file, created if absent (with its folder).

        Returns
        -------
        Printed
            The option object.

        Examples
        --------
        >>> Printed.to_file("/tmp/orders.txt").file_path
        '/tmp/orders.txt'
        """
        if not str(file_path).strip():
            raise InvalidArgumentError(
                "Printed.to_file needs a file path (a non-empty str)", parameter="file_path"
            )
        return Printed(file_path=resolve_path(file_path))

    def with_label(self, label: str) -> Printed[K, V]:
        """The same, with lines labelled ``[label]`` instead of the processor's name.

        Parameters
        ----------
        label
            The label.

        Returns
        -------
        Printed
            A new option object.

        Examples
        --------
        >>> Printed.to_sysout().with_label("debug").label
        'debug'
        """
        if not isinstance(label, str):
            raise InvalidArgumentError("a label must be a str", parameter="label")
        return attrs.evolve(self, label=label)

    def with_key_value_mapper(self, mapper: Callable[[KR, VR], object]) -> Printed[KR, VR]:
        """The same, printing ``str(mapper(key, value))`` instead of ``key, value``.

        Parameters
        ----------
        mapper
            A function of the key and the value.

        Returns
        -------
        Printed
            A new option object.

        Examples
        --------
        >>> p = Printed.to_sysout().with_key_value_mapper(lambda k, v: f"{k}={v}")
        >>> p.mapper("a", 1)
        'a=1'
        """
        if not callable(mapper):
            raise InvalidArgumentError("the mapper must be callable", parameter="mapper")
        return Printed(file_path=self.file_path, label=self.label, mapper=mapper, name=self.name)

    def with_name(self, name: str) -> Printed[K, V]:
        """The same, with the processor named ``name`` instead of ``KSTREAM-PRINTER-<n>``.

        Parameters
        ----------
        name
            The processor's name.

        Returns
        -------
        Printed
            A new option object.

        Examples
        --------
        >>> Printed.to_sysout().with_name("debug-print").name
        'debug-print'
        """
        if not str(name).strip():
            raise InvalidArgumentError("a processor name must not be empty", parameter="name")
        return attrs.evolve(self, name=name)
