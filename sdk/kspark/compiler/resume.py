"""Where a query on a rescaled app's new checkpoint starts reading, as the lowering needs it.

The runtime works it out from the app's checkpoint generations
(:meth:`kspark.runtime.checkpoints.Generation.resume`) and hands it to
:func:`kspark.compiler.lowering.build_dataframe`; it lives here, below both, so that the
compiler imports nothing of the runtime.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Resume"]


@attrs.frozen(kw_only=True)
class Resume:
    """Where a rescaled app's new query checkpoint starts (see kspark.runtime.regroup):
    files its inputs already consumed, Kafka offsets to start from, and the files each
    store's tasks start from.

    Examples
    --------
    >>> Resume(skip_files=("f.jsonl",)).kafka_offsets
    {}
    """

    skip_files: tuple[str, ...] = ()
    kafka_offsets: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: store -> task -> the group state naming the files a task starts from
    #: (``kspark_server.regroup``), for every batch until the task commits its own
    task_seeds: dict[str, dict[int, tuple[Any, ...]]] = attrs.field(factory=dict)

    @property
    def has_state(self) -> bool:
        """Whether the query's tasks start from state (its first batch restores)."""
        return bool(self.task_seeds)
