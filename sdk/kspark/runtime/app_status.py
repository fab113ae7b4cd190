"""The status of a submitted app, as ``kspark status`` and ``kspark stop`` report it."""

from __future__ import annotations

import re
from typing import Any

import attrs

from kspark.errors import CodeShippingError
from kspark.runtime.app import State
from kspark.runtime.failures import translate_failure
from kspark.runtime.handles import OutputInfo, SubmittedApp
from kspark.runtime.metrics import Batches, input_rows, progress_as_dict, rows_per_second

__all__ = ["AppStatus", "gone", "status_of"]


@attrs.frozen(kw_only=True)
class AppStatus:
    """What ``status`` and ``stop`` found on the server.

    ``batches``, ``input_records`` and ``output_records`` count the micro-batches of the
    current run that Spark still keeps in memory (the last 100 by default);
    ``last_batch_id`` counts over the checkpoint's whole life. ``last_progress`` is the
    last of those batches that read records from the app's sources (the last batch when
    none did): a batch that only moves the watermark, or records between sub-topologies,
    reads none.
    """

    app_id: str
    state: State
    message: str
    query_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    batches: int = 0
    input_records: int = 0
    output_records: int = 0
    last_batch_id: int | None = None
    last_progress: dict[str, Any] | None = None
    error: str | None = None
    checkpoint: str | None = None
    outputs: tuple[OutputInfo, ...] = ()
    #: Whether the request that made this status stopped the app's running query
    #: (``stop`` only).
    stopped: bool = False

    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=True)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppStatus:
        values = {k: v for k, v in data.items() if k in attrs.fields_dict(cls)}
        values["state"] = State(values["state"])
        values["outputs"] = tuple(OutputInfo(**o) for o in values.get("outputs") or ())
        return cls(**values)

    def summary(self) -> str:
        lines = [f"app        {self.app_id}", f"state      {self.state.value} ({self.message})"]
        if self.stopped:
            last = "none" if self.last_batch_id is None else self.last_batch_id
            lines.insert(0, f"stopped app {self.app_id}: query {self.query_id}, last batch {last}")
        if self.query_id:
            lines.append(f"query id   {self.query_id}  run id {self.run_id}")
        lines.append(
            f"batches    {self.batches} in this run"
            + (f" (last batch id {self.last_batch_id})" if self.last_batch_id is not None else "")
        )
        lines.append(f"records    {self.input_records:,} in, {self.output_records:,} out")
        p = self.last_progress
        if p:
            lines.append(
                f"last input batch {p.get('batchId')} at {p.get('timestamp')}: "
                f"{p.get('numInputRows')} rows, "
                f"{float(p.get('processedRowsPerSecond') or 0):,.0f} rows/s"
            )
        if self.error:
            lines.append(f"error      {self.error}")
        if self.checkpoint:
            lines.append(f"checkpoint {self.checkpoint}")
        lines += [f"output     {o.describe()}" for o in self.outputs]
        return "\n".join(lines)


_PROGRESS_KEYS = (
    "batchId",
    "timestamp",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
)


def _last_progress(p: dict[str, Any]) -> dict[str, Any]:
    """The figures of a progress that the status keeps, with ``numInputRows`` counted as
    the app counts records in (Spark's counts a forked source once per branch), and the
    rate computed from it (the client's progress may lack Spark's)."""
    out = {k: p.get(k) for k in _PROGRESS_KEYS}
    out["numInputRows"] = input_rows(p)
    out["processedRowsPerSecond"] = rows_per_second(p)
    return out


def status_of(query: Any, handle: SubmittedApp) -> AppStatus:
    """Read a query (active, or stopped and still in the server's cache) into AppStatus."""
    active = bool(query.isActive)
    progresses = [progress_as_dict(p) for p in (query.recentProgress or [])]
    seen = Batches()
    for p in progresses:
        seen.add(p)
    # the last batch that read source records: in an app of several sub-topologies every
    # batch with input is followed by one that moves records between them, and a batch
    # that only moves the watermark reads none either, so the last batch alone would
    # show "0 rows, 0 rows/s" most of the time
    with_input = [p for p in progresses if input_rows(p) > 0]
    last = (with_input or progresses)[-1] if progresses else None
    error: str | None = None
    if not active:
        exc = query.exception()
        if exc is not None:
            error = _failure(exc, handle.app_id)
    if active:
        state, message = State.RUNNING, str((query.status or {}).get("message", ""))
    elif error:
        state, message = State.ERROR, "the query failed"
    else:
        state, message = State.NOT_RUNNING, "the query was stopped"
    return AppStatus(
        app_id=handle.app_id,
        state=state,
        message=message,
        query_id=str(query.id),
        run_id=str(query.runId),
        session_id=handle.session_id,
        batches=seen.totals.batches,
        input_records=seen.totals.records_in,
        output_records=seen.totals.records_out,
        last_batch_id=max((b for _, b in seen.keys()), default=None),
        last_progress=_last_progress(last) if last else None,
        error=error,
        checkpoint=handle.checkpoint,
        outputs=handle.outputs,
    )


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _failure(exc: Any, app_id: str) -> str:
    """The message of a failed query; a module the workers could not import is named as
    such (the plan text in Spark's message can otherwise be mistaken for the cause)."""
    m = _MISSING_MODULE.search(str(exc))
    if m is not None:
        return str(
            CodeShippingError(
                f"app {app_id} failed: the server's Python workers cannot import module "
                f"{m.group(1)!r}; kspark ships the topology's modules and their local packages, "
                "so install the module on the server, or make it part of a local package the "
                "topology uses",
                module=m.group(1),
                application_id=app_id,
            )
        )
    return str(translate_failure(exc, app_id, log=True))


def gone(handle: SubmittedApp, message: str) -> AppStatus:
    if handle.final is not None:  # ``stop`` recorded how it ended
        final = AppStatus.from_dict(handle.final)
        return attrs.evolve(final, message=f"{final.message}; {message}")
    return AppStatus(
        app_id=handle.app_id,
        state=State.NOT_RUNNING,
        message=message,
        query_id=handle.query_id or None,
        run_id=handle.run_id or None,
        session_id=handle.session_id,
        checkpoint=handle.checkpoint,
        outputs=handle.outputs,
    )
