"""The ``apply_in_pandas`` runner: a stateful operator under ``applyInPandasWithState``.

Spark hands the function each task's records of a micro-batch straight from the shuffle
(no packing pass before it) and the task's group state: the committed version of the
task's state, whose base and changes are kspark's own files in the checkpoint
(:mod:`kspark_server.taskfiles`). The operator is the same
:class:`~kspark_server.operators.base.TaskProcessor` the ``transform_with_state`` runner
runs: the files stand in for its state variables. See docs/design/grouped-runner.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa

from kspark_server import placement, statevars, taskfiles, transport
from kspark_server.operators.base import TaskProcessor
from kspark_server.operators.registry import make_operator
from kspark_server.spec import StatefulSpec, check_spec

__all__ = ["GroupedOperator"]


class GroupedOperator:
    """The function ``applyInPandasWithState`` runs for a stateful ``spec``.

    ``constants_json`` describes the envelope columns left out of the records
    (:func:`kspark_server.chain.constant_widener`); ``input_schema_json`` is the records'
    Spark schema, in which their pandas frames are read back into Arrow; ``state_root``
    is the folder of the operators' files (:func:`kspark_server.taskfiles.state_root`).
    """

    def __init__(
        self, spec: StatefulSpec, constants_json: str, input_schema_json: str, state_root: str
    ) -> None:
        self.spec = check_spec(spec)
        self.constants_json = constants_json
        self.input_schema_json = input_schema_json
        self.state_root = state_root
        self._operator: TaskProcessor | None = None
        self._schema: pa.Schema | None = None

    def __getstate__(self) -> dict[str, Any]:
        # built on the worker
        return {**self.__dict__, "_operator": None, "_schema": None}

    def operator(self) -> TaskProcessor:
        """The operator, built on first use (on the worker)."""
        if self._operator is None:
            self._operator = make_operator(self.spec, self.constants_json)
        return self._operator

    def table(self, frames: list[Any]) -> pa.Table:
        """The task's records as one Arrow table in the input's schema (Arrow tables, as
        the in-process engine hands them, as they are)."""
        if all(isinstance(f, pa.Table) for f in frames):
            return frames[0] if len(frames) == 1 else pa.concat_tables(frames)
        if self._schema is None:
            self._schema = transport.arrow_schema(self.input_schema_json)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        return pa.Table.from_pandas(frame, schema=self._schema, preserve_index=False)

    def __call__(self, key: Any, rows: Iterator[Any], state: Any) -> Iterator[Any]:
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        op = self.operator()
        task = placement.task_of(int(key[0]))
        committed = state.get if state.exists else None
        files = taskfiles.TaskFiles(self.state_root, self.spec.store, task, committed)
        if files.just_compacted():
            # the files the committed base replaced, and failed attempts' files
            files.collect()
        op.attach(statevars.StateVars(files.base, files.log, files.version))
        result = op.run_task(key, self.table(frames))
        # the batch's files are written and fsynced: the version that names them commits
        # with the micro-batch
        state.update(files.committed())
        if result is not None:
            yield pd.DataFrame({"ks_rows": [transport.pack_table(result)]})
