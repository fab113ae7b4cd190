"""One task of the versioned-table join driven directly (no Spark), with its columnar
path on or off, for the tests that compare the two paths."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from support.taskharness import TaskState, close_local_stores

from kspark_server import placement, taskstate
from kspark_server.operators.stream_table_join import JoinProcessor
from kspark_server.spec import JoinSpec

#: (table?, key, value, timestamp, partition): the value as the test describes it
Rec = tuple[int, str | None, str | None, int, int]

#: A record's value text from its side, its described value and its position.
ValueText = Callable[[int, str | None, int], str | None]


def as_given(side: int, value: str | None, seq: int) -> str | None:
    """The described value as the record's text."""
    return value


def frame(batch: list[tuple[int, Rec]], text: ValueText = as_given) -> pd.DataFrame:
    """The operator's input rows of ``batch``: ``(position, record)`` pairs, a table
    update's value in ``ks_tvalue``, a stream record's in ``value``."""
    rows = []
    for seq, (side, key, value, ts, part) in batch:
        body = text(side, value, seq)
        rows.append(
            {
                "key": key,
                "value": None if side else body,
                "timestamp": ts,
                "headers": [],
                "topic": "rates" if side else "payments",
                "partition": part,
                "offset": seq,
                "ks_seq": seq,
                "ks_sub": 0,
                "ks_side": None,
                "ks_tvalue": body if side else None,
                "ks_jside": side,
                "ks_hash": 7 if key is None else ord(key[0]),
                "ks_task": 0,
            }
        )
    return pd.DataFrame(rows)


class Runner:
    """One task of the join across batches: columnar where it can be, or record by record
    (``columnar`` False)."""

    def __init__(
        self,
        spec: JoinSpec,
        columnar: bool,
        tmp: Any,
        mp: pytest.MonkeyPatch,
        text: ValueText = as_given,
    ) -> None:
        self.spec, self.columnar, self.tmp, self.mp, self.text = spec, columnar, tmp, mp, text
        self.durable = TaskState(tmp / f"checkpoint-{columnar}")
        self.executors = itertools.count()
        #: batches the columnar path took
        self.columnar_batches = 0
        self.restart()

    def restart(self) -> None:
        """A new operator on a new executor (a local state folder of its own)."""
        self.mp.setenv(
            "KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"{self.columnar}-{next(self.executors)}")
        )
        self.proc = JoinProcessor(self.spec)
        if not self.columnar:
            self.proc._process_asof = lambda *a: False  # type: ignore[method-assign]
            return
        asof = self.proc._process_asof

        def counted(*args: Any) -> bool:
            took = asof(*args)
            self.columnar_batches += took
            return took

        self.proc._process_asof = counted  # type: ignore[method-assign]

    def run(self, batch: list[tuple[int, Rec]]) -> list[dict[str, Any]]:
        """The output rows of one batch."""
        key = (placement.task_keys(1)[0],)
        table = self.durable.run(self.proc, key, frame(batch, self.text))
        return [] if table is None else table.to_pylist()

    def state(self) -> Any:
        """The durable state of the table, as its files give it."""
        log = self.durable.log("rates")
        return taskstate.materialize("join", True, self.durable.chunks("rates"), log)


def run_both(
    tmp: Any,
    data: list[Rec],
    cuts: list[int],
    restarts: list[bool],
    spec: JoinSpec,
    text: ValueText = as_given,
) -> int:
    """Both paths over ``data`` cut at ``cuts`` into batches (a restart after batch ``i``
    where ``restarts[i]``): equal output and state after every batch. Returns the
    batches the columnar path took."""
    tmp.mkdir(parents=True, exist_ok=True)
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    numbered = list(enumerate(data))
    batches = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = Runner(spec, True, tmp, mp, text), Runner(spec, False, tmp, mp, text)
        try:
            for batch, restart in zip(batches, [*restarts, *[False] * len(batches)], strict=False):
                assert fast.run(batch) == slow.run(batch)
                assert fast.state() == slow.state()
                if restart:
                    close_local_stores()
                    fast.restart()
                    slow.restart()
        finally:
            close_local_stores()
    return fast.columnar_batches
