"""``KStream.print``: the action that prints each record as Kafka Streams' ``Printed`` does.

Each record becomes one line, ``[label]: key, value`` (or ``[label]: `` and what the
mapper makes of the record), written where the record is processed: in the Python worker
of the Spark executor that runs its task. ``sys.stdout`` there is the executor's standard
output (its log on a cluster); a file path is a file on that executor's machine, to which
every worker appends its lines.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["PrintAction", "format_record"]


def _text(x: Any) -> str:
    return "null" if x is None else str(x)


def format_record(
    label: str, key: Any, value: Any, mapper: Callable[[Any, Any], Any] | None
) -> str:
    """One printed line (without its newline).

    >>> format_record("orders", "a", 1, None)
    '[orders]: a, 1'
    >>> format_record("orders", None, 1, lambda k, v: f"{v}!")
    '[orders]: 1!'
    """
    shown = _text(mapper(key, value)) if mapper is not None else f"{_text(key)}, {_text(value)}"
    return f"[{label}]: {shown}"


class PrintAction:
    """Prints one record: to the worker's standard output (``path`` None) or appended to
    the file ``path``. Picklable: the open file is the worker process's own."""

    def __init__(
        self, label: str, path: str | None = None, mapper: Callable[[Any, Any], Any] | None = None
    ) -> None:
        self.label, self.path, self.mapper = label, path, mapper

    def __call__(self, key: Any, value: Any) -> None:
        line = format_record(self.label, key, value, self.mapper) + "\n"
        if self.path is None:
            sys.stdout.write(line)
            sys.stdout.flush()
            return
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        # opened per record, never cached: the action and its module are pickled to the
        # workers (by value where the server lacks kspark_server), and an open file does
        # not pickle. One append of a whole line reaches the file whole, whichever worker
        # writes it.
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(line)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrintAction) and (self.label, self.path, self.mapper) == (
            other.label,
            other.path,
            other.mapper,
        )

    def __hash__(self) -> int:
        return hash((self.label, self.path))

    def __repr__(self) -> str:
        return f"PrintAction(label={self.label!r}, path={self.path!r})"
