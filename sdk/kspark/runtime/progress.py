"""Progress of long runs: batches, records and throughput, in a terminal or in Jupyter.

A :class:`ProgressReporter` receives each new micro-batch progress of a Spark streaming
query (the plain-dict form of Spark's ``StreamingQueryProgress``) through ``update``, free
text such as ``"restoring state"`` through ``phase``, and a final line through ``close``.
:func:`progress_reporter` picks an implementation for where the code runs and
:func:`watch` waits for a query while feeding its progress to a reporter.

The module uses the standard library only. The notebook display uses IPython's
``display(..., display_id=True)`` when a Jupyter kernel is running; it needs no
ipywidgets.

Examples
--------
>>> import io
>>> out, now = io.StringIO(), [0.0]
>>> r = TerminalProgress(out, label="payments", tty=False, clock=lambda: now[0])
>>> now[0] = 2.0
>>> r.update({"runId": "r", "batchId": 0, "numInputRows": 5000, "batchDuration": 1500})
>>> r.close("done")
>>> print(out.getvalue(), end="")
payments: 1 batch, 5,000 records in, 2,500 records/s, last batch 1.5s, elapsed 2.0s
payments: done
"""

from __future__ import annotations

import html
import importlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TextIO, cast, runtime_checkable

from kspark._typing import ProgressMode
from kspark.errors import InvalidArgumentError

__all__ = [
    "INPUT_METRICS_PREFIX",
    "OBSERVED_METRICS",
    "NotebookProgress",
    "NullProgress",
    "ProgressMode",
    "ProgressReporter",
    "ProgressTotals",
    "QueryLike",
    "TerminalProgress",
    "batch_ms",
    "format_seconds",
    "in_notebook",
    "input_rows",
    "is_idle",
    "observed",
    "progress_as_dict",
    "progress_reporter",
    "resolve_progress",
    "watch",
]


#: The name under which the compiled query observes its metrics. It must equal
#: ``kspark.compiler.lower.SIDE_METRICS`` (a unit test checks); it is repeated here so that
#: this module does not import the compiler, and with it pyspark.
OBSERVED_METRICS = "kspark"

#: The prefix of the observations that count each source's records; it must equal
#: ``kspark.compiler.lower.INPUT_METRICS_PREFIX`` (a unit test checks).
INPUT_METRICS_PREFIX = "kspark_in:"

_Clock = Callable[[], float]


# -- the protocol --------------------------------------------------------------------------
@runtime_checkable
class ProgressReporter(Protocol):
    """Receives a run's progress.

    ``update`` is called once per new micro-batch progress (a mapping with Spark's
    ``StreamingQueryProgress`` keys: ``runId``, ``batchId``, ``numInputRows``,
    ``batchDuration``, ``durationMs``, ``sources``, ``stateOperators``,
    ``observedMetrics``...). A progress with the ``(runId, batchId)`` of an earlier one
    replaces it (see :class:`ProgressTotals`). ``phase`` shows a step that is not a micro-batch (None clears it);
    ``close`` ends the display, with an optional summary line.
    """

    def update(self, progress: Mapping[str, Any]) -> None: ...

    def phase(self, text: str | None) -> None: ...

    def close(self, summary: str | None = None) -> None: ...


class QueryLike(Protocol):
    """The part of Spark's ``StreamingQuery`` that :func:`watch` uses."""

    def awaitTermination(self, timeout: float | None = None) -> bool | None: ...

    @property
    def recentProgress(self) -> Sequence[Any]: ...


# -- reading a progress --------------------------------------------------------------------
def progress_as_dict(progress: Any) -> dict[str, Any]:
    """A progress as a plain dict of JSON values.

    Accepts a dict, or pyspark's ``StreamingQueryProgress`` (a dict subclass whose values
    include UUIDs and Rows, so its ``json`` form is preferred), or any object with a
    ``json`` string attribute.

    Examples
    --------
    >>> progress_as_dict({"batchId": 3})
    {'batchId': 3}
    >>> class P:
    ...     json = '{"batchId": 4, "numInputRows": 10}'
    >>> progress_as_dict(P())
    {'batchId': 4, 'numInputRows': 10}
    """
    try:
        text = getattr(progress, "json", None)
    except Exception:  # pyspark's property asserts it has its JSON source
        text = None
    if isinstance(text, str):
        try:
            loaded = json.loads(text)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded
    if isinstance(progress, Mapping):
        return dict(progress)
    raise InvalidArgumentError(
        f"a streaming progress must be a mapping or have a json attribute, "
        f"not {type(progress).__name__}"
    )


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _key(p: Mapping[str, Any]) -> tuple[str, int]:
    batch = p.get("batchId")
    return (str(p.get("runId")), -1 if batch is None else _int(batch))


def input_rows(p: Mapping[str, Any]) -> int:
    """Records read by one micro-batch.

    A stream that feeds two sinks, or branches merged again, is scanned once per path
    through the query plan, and Spark's ``numInputRows`` (overall and per source) sums
    every scan, so it counts such records more than once. kspark's compiled query observes
    each source's records (observations named ``INPUT_METRICS_PREFIX + processor``); this
    sums those, and falls back to Spark's count for a progress without them.

    Examples
    --------
    >>> input_rows({"numInputRows": 20, "observedMetrics": {
    ...     "kspark_in:KSTREAM-SOURCE-0000000000": {"records": 10},
    ...     "kspark": {"records": 20, "side": []}}})
    10
    >>> input_rows({"numInputRows": 7})
    7
    >>> input_rows({"sources": [{"description": "KafkaV2[Subscribe[in]]", "numInputRows": 7}]})
    7
    """
    metrics = p.get("observedMetrics")
    if isinstance(metrics, Mapping):
        counts = [
            _int(_decode_observation(m).get("records"))
            for name, m in metrics.items()
            if isinstance(name, str) and name.startswith(INPUT_METRICS_PREFIX)
        ]
        if counts:
            return sum(counts)
    sources = p.get("sources")
    if p.get("numInputRows") is None and isinstance(sources, list):
        # pyspark's JSON form of a progress leaves the total out; its sources carry it
        return sum(_int(s.get("numInputRows")) for s in sources if isinstance(s, Mapping))
    return _int(p.get("numInputRows"))


def _decode_row(values: Any, schema: Any) -> Any:
    # Spark's JSON of an observed Row is [values, schema] pairs or {"values", "schema"}
    # structs, nested
    if isinstance(values, Mapping) and "values" in values and "schema" in values:
        return _decode_row(values["values"], values["schema"])
    if isinstance(schema, Mapping) and schema.get("type") == "struct" and isinstance(values, list):
        return {
            f["name"]: _decode_row(v, f["type"])
            for f, v in zip(schema["fields"], values, strict=False)
        }
    if isinstance(schema, Mapping) and schema.get("type") == "array" and isinstance(values, list):
        return [_decode_row(v, schema["elementType"]) for v in values]
    return values


def observed(p: Mapping[str, Any]) -> dict[str, Any]:
    """kspark's observed metrics of one micro-batch: ``records`` (written to sinks) and
    ``side`` (a list of ``{kind, processor, task, count}``); empty if there are none.

    Examples
    --------
    >>> observed({"observedMetrics": {"kspark": {"records": 3, "side": []}}})
    {'records': 3, 'side': []}
    >>> observed({})
    {}
    """
    return _decode_observation((p.get("observedMetrics") or {}).get(OBSERVED_METRICS))


def _decode_observation(m: Any) -> dict[str, Any]:
    """One observation's row (in any of the forms a progress carries) as a dict."""
    if m is None:
        return {}
    if isinstance(m, list) and len(m) == 2 and isinstance(m[1], Mapping):
        decoded = _decode_row(m[0], m[1])
    else:
        if hasattr(m, "asDict"):
            m = m.asDict(recursive=True)
        decoded = _decode_row(m, None)
    return dict(decoded) if isinstance(decoded, Mapping) else {}


def batch_ms(p: Mapping[str, Any]) -> int | None:
    """How long one micro-batch took, in milliseconds, if the progress says."""
    if p.get("batchDuration") is not None:
        return _int(p.get("batchDuration"))
    duration = p.get("durationMs") or {}
    if isinstance(duration, Mapping) and duration.get("triggerExecution") is not None:
        return _int(duration.get("triggerExecution"))
    return None


# -- totals --------------------------------------------------------------------------------
def is_idle(p: Mapping[str, Any]) -> bool:
    """Whether a progress reports a trigger that ran no batch (no new data).

    Spark reports an idle trigger now and then under the id of a batch before or after
    it; such an entry must not replace the batch that ran under that id.

    Examples
    --------
    >>> is_idle({"numInputRows": 0, "durationMs": {"latestOffset": 2, "triggerExecution": 2}})
    True
    >>> is_idle({"numInputRows": 0, "durationMs": {"addBatch": 40, "triggerExecution": 50}})
    False
    """
    duration = p.get("durationMs") or {}
    return input_rows(p) == 0 and isinstance(duration, Mapping) and "addBatch" not in duration


class _Batch:
    __slots__ = ("dead_letters", "dropped", "duplicates", "ran", "records_in", "records_out")

    def __init__(self, p: Mapping[str, Any]) -> None:
        obs = observed(p)
        self.ran = 0 if is_idle(p) else 1
        self.records_in = input_rows(p)
        self.records_out = _int(obs.get("records"))
        self.dropped = self.duplicates = self.dead_letters = 0
        for s in obs.get("side") or []:
            if not isinstance(s, Mapping):
                continue
            kind, count = s.get("kind"), _int(s.get("count"))
            if kind in ("dropped", "dlq"):  # a record sent to the DLQ was dropped too
                self.dropped += count
            if kind == "dlq":
                self.dead_letters += count
            elif kind == "duplicates":
                self.duplicates += count


class ProgressTotals:
    """Counts over the micro-batches a reporter has seen.

    A progress with the ``(runId, batchId)`` of an earlier one replaces it, unless it is
    an idle trigger (see :func:`is_idle`) and the earlier one ran a batch. Idle triggers
    are not counted as batches.

    Parameters
    ----------
    clock
        Seconds, for ``elapsed``; :func:`time.monotonic` by default.

    Examples
    --------
    >>> t = ProgressTotals(clock=iter([0.0, 4.0]).__next__)
    >>> t.add({"runId": "r", "batchId": 0, "numInputRows": 0})
    >>> t.add({"runId": "r", "batchId": 0, "numInputRows": 100})  # replaces the idle one
    >>> t.add({"runId": "r", "batchId": 0, "numInputRows": 0})  # idle again: ignored
    >>> t.batches, t.records_in, t.records_per_second()
    (1, 100, 25.0)
    """

    def __init__(self, clock: _Clock = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self._batches: dict[tuple[str, int], _Batch] = {}
        self.ran = 0
        self.records_in = 0
        self.records_out = 0
        self.dropped = 0
        self.duplicates = 0
        self.dead_letters = 0
        self.last: dict[str, Any] | None = None

    @property
    def batches(self) -> int:
        """Micro-batches that ran (idle triggers left out)."""
        return self.ran

    def add(self, progress: Mapping[str, Any]) -> None:
        p = dict(progress)
        key = _key(p)
        old = self._batches.get(key)
        new = _Batch(p)
        if old is not None and old.ran and not new.ran:
            return
        for name in _Batch.__slots__:
            delta = getattr(new, name) - (getattr(old, name) if old is not None else 0)
            setattr(self, name, getattr(self, name) + delta)
        self._batches[key] = new
        if new.ran or self.last is None:  # "last batch" is one that ran
            self.last = p

    def elapsed(self) -> float:
        return max(0.0, self._clock() - self.started)

    def records_per_second(self, elapsed: float | None = None) -> float:
        """Records in over the whole run (not the last batch's rate)."""
        seconds = self.elapsed() if elapsed is None else elapsed
        return self.records_in / seconds if seconds > 0 else 0.0

    def last_batch_ms(self) -> int | None:
        return None if self.last is None else batch_ms(self.last)

    def state_rows(self) -> int | None:
        """Rows in all state stores after the last batch, if the query has state."""
        ops = (self.last or {}).get("stateOperators") or []
        if not ops:
            return None
        return sum(_int(op.get("numRowsTotal")) for op in ops if isinstance(op, Mapping))

    def fields(self, elapsed: float | None = None) -> list[tuple[str, str]]:
        """The figures to show, as ``(name, formatted value)`` pairs, the main ones first;
        counts that are zero (or unknown) after ``elapsed`` are left out."""
        seconds = self.elapsed() if elapsed is None else elapsed
        out = [
            ("batches", f"{self.batches:,}"),
            ("records in", f"{self.records_in:,}"),
            ("records/s", f"{self.records_per_second(seconds):,.0f}"),
        ]
        ms = self.last_batch_ms()
        if ms is not None:
            out.append(("last batch", format_seconds(ms / 1000)))
        out.append(("elapsed", format_seconds(seconds)))
        rows = self.state_rows()
        for name, count in [
            ("records out", self.records_out),
            ("dropped", self.dropped),
            ("to DLQ", self.dead_letters),
            ("duplicates", self.duplicates),
            ("state rows", rows),
        ]:
            if count:
                out.append((name, f"{count:,}"))
        return out

    def line(self, elapsed: float | None = None) -> str:
        """One line, the main figures first (a narrow terminal cuts the end).

        Examples
        --------
        >>> t = ProgressTotals(clock=lambda: 2.0)
        >>> t.add({"runId": "r", "batchId": 0, "numInputRows": 100, "batchDuration": 900,
        ...        "observedMetrics": {"kspark": {"records": 97, "side": [
        ...            {"kind": "dlq", "count": 3}]}}})
        >>> print(t.line(elapsed=2.0))
        1 batch, 100 records in, 50 records/s, last batch 0.90s, elapsed 2.0s; 97 out, 3 dropped (3 to DLQ)
        """
        main, extra = [], []
        figures = dict(self.fields(elapsed))
        for name, value in figures.items():
            if name == "batches":
                main.append(f"{value} batch" + ("" if self.batches == 1 else "es"))
            elif name in ("last batch", "elapsed"):
                main.append(f"{name} {value}")
            elif name in ("records in", "records/s"):
                main.append(f"{value} {name}")
            elif name == "records out":
                extra.append(f"{value} out")
            elif name == "dropped" and "to DLQ" in figures:
                extra.append(f"{value} dropped ({figures['to DLQ']} to DLQ)")
            elif name != "to DLQ":
                extra.append(f"{value} {name}")
        return ", ".join(main) + ("; " + ", ".join(extra) if extra else "")


def format_seconds(seconds: float) -> str:
    """A short duration.

    Examples
    --------
    >>> format_seconds(0.25), format_seconds(12.34), format_seconds(125), format_seconds(3725)
    ('0.25s', '12.3s', '2m05s', '1h02m')
    """
    if seconds < 1:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# -- implementations -----------------------------------------------------------------------
class NullProgress:
    """Shows nothing.

    Examples
    --------
    >>> r = NullProgress()
    >>> r.update({"batchId": 0}); r.phase("x"); r.close("done")
    """

    def update(self, progress: Mapping[str, Any]) -> None:
        pass

    def phase(self, text: str | None) -> None:
        pass

    def close(self, summary: str | None = None) -> None:
        pass


class TerminalProgress:
    """Progress on a text stream.

    On a terminal (``stream.isatty()``) it rewrites one status line with ``\\r``. Otherwise,
    in a log, it writes whole lines, at most one status line per ``min_interval`` seconds;
    phases and the final state are always written.

    Parameters
    ----------
    stream
        Where to write; ``sys.stderr`` by default (looked up when created).
    label
        Put in front of each line, for example the application id.
    tty
        Whether to rewrite one line; ``stream.isatty()`` by default.
    min_interval
        Seconds between status lines in a log (default 10) or between redraws on a
        terminal (default 0.1).
    width
        Cut lines on a terminal to this many characters; by default the terminal's width.
    clock
        Seconds; :func:`time.monotonic` by default.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> r = TerminalProgress(out, tty=False, clock=lambda: 1.0)
    >>> r.phase("restoring state")
    >>> r.close()
    >>> print(out.getvalue(), end="")
    restoring state
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        label: str | None = None,
        tty: bool | None = None,
        min_interval: float | None = None,
        width: int | None = None,
        clock: _Clock = time.monotonic,
    ) -> None:
        self.stream: TextIO = sys.stderr if stream is None else stream
        self.label = label
        self.tty = _isatty(self.stream) if tty is None else tty
        self.min_interval = (0.1 if self.tty else 10.0) if min_interval is None else min_interval
        self._width = width
        self._clock = clock
        self.totals = ProgressTotals(clock)
        self._phase: str | None = None
        self._last_status: float | None = None  # when the status was last written
        self._pending = False  # a change to the figures not written yet
        self._drawn = 0  # characters of the status line now on a terminal
        self._closed = False

    # -- ProgressReporter
    def update(self, progress: Mapping[str, Any]) -> None:
        if self._closed:
            return
        first = self.totals.batches == 0
        self.totals.add(progress)
        self._pending = True
        # the first batch is shown at once, so a slow run is visibly alive
        self._maybe_write(force=first and self.totals.batches > 0)

    def phase(self, text: str | None) -> None:
        if self._closed or text == self._phase:
            return
        self._phase = text
        if self.tty:
            self._maybe_write(force=True)
        elif text:
            # phases are few and say what the run is doing: never held back
            self._emit(self._prefix() + text)

    def refresh(self) -> None:
        """Redraw the elapsed time on a terminal; in a log, write a held-back change once
        ``min_interval`` has passed. :func:`watch` calls this on every poll."""
        if self._closed:
            return
        if self.tty:
            if self.totals.batches:  # only the figures have a clock to redraw
                self._maybe_write(force=False, interval=max(self.min_interval, 1.0))
        elif self._pending:
            self._maybe_write(force=False)

    def close(self, summary: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._phase = None
        if self.tty:
            if self.totals.batches:
                self._draw()  # the final figures stay on screen
                self.stream.write("\n")
            elif self._drawn:
                self._draw()  # no batch ran: wipe the phase and leave no empty line
                self.stream.write("\r")
        elif self._pending:
            self._emit(self._status())
        if summary:
            self.stream.write(self._prefix() + summary + "\n")
        self.stream.flush()

    # -- drawing
    def _prefix(self) -> str:
        return f"{self.label}: " if self.label else ""

    def _status(self) -> str:
        text = self._prefix() + self.totals.line()
        if self._phase:
            text += f" [{self._phase}]"
        return text

    def _maybe_write(self, force: bool, interval: float | None = None) -> None:
        now = self._clock()
        wait = self.min_interval if interval is None else interval
        if not force and self._last_status is not None and now - self._last_status < wait:
            return
        self._last_status = now
        self._pending = False
        if self.tty:
            self._draw()
        else:
            self._emit(self._status())

    def _draw(self) -> None:
        width = self._width or max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        if not self.totals.batches:
            # before the first batch only the phase, if any: no row of zeros
            text = self._prefix() + self._phase if self._phase else ""
        else:
            text = self._status()
        text = text[:width]
        # pad over the rest of a longer earlier line instead of relying on ANSI codes
        self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self.stream.flush()
        self._drawn = len(text)

    def _emit(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


class _Status:
    """What the notebook display shows: HTML for Jupyter, text for other front ends."""

    def __init__(
        self, title: str, fields: list[tuple[str, str]], line: str, note: str | None
    ) -> None:
        self.title, self.fields, self.line, self.note = title, fields, line, note

    def __repr__(self) -> str:
        return f"{self.title}: {self.line}" + (f"\n{self.note}" if self.note else "")

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<td style='padding:0 1em 0 0'><span style='opacity:.6'>{html.escape(n)}</span>"
            f"<br><b>{html.escape(v)}</b></td>"
            for n, v in self.fields
        )
        note = f"<div style='margin-top:.3em'>{html.escape(self.note)}</div>" if self.note else ""
        return (
            "<div class='kspark-progress' style='font-family:monospace;font-size:90%'>"
            f"<div><b>{html.escape(self.title)}</b></div>"
            f"<table style='border-collapse:collapse'><tr>{cells}</tr></table>{note}</div>"
        )


class _DisplayHandle(Protocol):
    def update(self, obj: Any) -> None: ...


class NotebookProgress:
    """Progress in a Jupyter notebook: one output area, updated in place.

    Parameters
    ----------
    label
        The title, for example the application id.
    display
        IPython's ``display`` (the default); called as ``display(obj, display_id=True)``
        and expected to return a handle with ``update(obj)``.
    min_interval
        Seconds between updates of the output area (default 0.25).
    clock
        Seconds; :func:`time.monotonic` by default.

    Examples
    --------
    >>> class Handle:
    ...     def update(self, obj): print("update:", repr(obj))
    >>> def display(obj, display_id=False):
    ...     print("display:", repr(obj)); return Handle()
    >>> r = NotebookProgress(label="demo", display=display, clock=lambda: 0.0)
    >>> r.update({"runId": "r", "batchId": 0, "numInputRows": 10})
    display: demo running: 1 batch, 10 records in, 0 records/s, elapsed 0.00s
    >>> r.close("1 micro-batch(es), 10 records in")
    update: demo finished: 1 batch, 10 records in, 0 records/s, elapsed 0.00s
    1 micro-batch(es), 10 records in
    """

    def __init__(
        self,
        *,
        label: str | None = None,
        display: Callable[..., Any] | None = None,
        min_interval: float = 0.25,
        clock: _Clock = time.monotonic,
    ) -> None:
        if display is None:
            try:
                # imported by name: IPython is optional and has no place in the type check
                module = importlib.import_module("IPython.display")
            except ImportError as exc:
                raise InvalidArgumentError(
                    "progress='notebook' needs IPython (run it in a Jupyter kernel)"
                ) from exc
            display = cast("Callable[..., Any]", module.display)
        self._display: Callable[..., Any] = display
        self._handle: _DisplayHandle | None = None
        self.label = label or "kspark"
        self.min_interval = min_interval
        self._clock = clock
        self.totals = ProgressTotals(clock)
        self._phase: str | None = None
        self._last_show: float | None = None
        self._closed = False

    def update(self, progress: Mapping[str, Any]) -> None:
        if self._closed:
            return
        self.totals.add(progress)
        self._show(force=False)

    def phase(self, text: str | None) -> None:
        if self._closed or text == self._phase:
            return
        self._phase = text
        self._show(force=True)

    def refresh(self) -> None:
        """Update the elapsed time, at most once a second."""
        if not self._closed:
            self._show(force=False, interval=max(self.min_interval, 1.0))

    def close(self, summary: str | None = None) -> None:
        if self._closed:
            return
        self._phase = None
        self._closed = True
        self._render("finished", summary)

    def _show(self, force: bool, interval: float | None = None) -> None:
        now = self._clock()
        wait = self.min_interval if interval is None else interval
        if (
            not force
            and self._handle is not None
            and self._last_show is not None
            and now - self._last_show < wait
        ):
            return
        self._last_show = now
        self._render("running", self._phase)

    def _render(self, state: str, note: str | None) -> None:
        elapsed = self.totals.elapsed()
        status = _Status(
            f"{self.label} {state}",
            self.totals.fields(elapsed),
            self.totals.line(elapsed),
            note,
        )
        if self._handle is None:
            self._handle = self._display(status, display_id=True)
        else:
            self._handle.update(status)


# -- choosing one --------------------------------------------------------------------------
def in_notebook() -> bool:
    """Whether this code runs in a Jupyter (ipykernel) kernel.

    It looks only at an IPython that is already imported, as it is in every kernel, so
    it never imports IPython itself.
    """
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    if get_ipython is None:
        return False
    try:
        shell = get_ipython()
    except Exception:
        return False
    if shell is None:
        return False
    # the terminal IPython shell has no kernel; ipykernel's ZMQInteractiveShell has one
    return getattr(shell, "kernel", None) is not None or (
        type(shell).__name__ == "ZMQInteractiveShell"
    )


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        return False


def progress_reporter(
    mode: ProgressMode = "auto",
    stream: TextIO | None = None,
    *,
    label: str | None = None,
) -> ProgressReporter:
    """A reporter for where the code runs.

    Parameters
    ----------
    mode
        ``"auto"``: in a Jupyter kernel the notebook display, on a terminal the
        one-line display, otherwise (a log, a pipe, a test) nothing.
        ``"terminal"``: text on ``stream``, a rewritten line on a terminal and
        rate-limited lines elsewhere. ``"notebook"``: the notebook display (needs
        IPython). ``"none"``: nothing.
    stream
        For text, ``sys.stderr`` by default.
    label
        Put in front of the figures, for example the application id.

    Raises
    ------
    InvalidArgumentError
        For an unknown mode, or ``"notebook"`` without IPython.

    Examples
    --------
    >>> import io
    >>> type(progress_reporter("auto", io.StringIO())).__name__
    'NullProgress'
    >>> type(progress_reporter("terminal", io.StringIO())).__name__
    'TerminalProgress'
    """
    out: TextIO = sys.stderr if stream is None else stream
    if mode == "none":
        return NullProgress()
    if mode == "terminal":
        return TerminalProgress(out, label=label)
    if mode == "notebook":
        return NotebookProgress(label=label)
    if mode == "auto":
        if in_notebook():
            return NotebookProgress(label=label)
        if _isatty(out):
            return TerminalProgress(out, label=label, tty=True)
        return NullProgress()
    raise InvalidArgumentError(
        f"progress mode must be 'auto', 'terminal', 'notebook' or 'none', not {mode!r}"
    )


def resolve_progress(
    progress: bool | ProgressMode | ProgressReporter | None,
    stream: TextIO | None = None,
    *,
    label: str | None = None,
) -> ProgressReporter:
    """The reporter for a ``progress=`` argument.

    ``None``/``False``: nothing. ``True``: the notebook display in a kernel, else text
    (also when the stream is not a terminal: the caller asked for it). A mode string: as
    :func:`progress_reporter`. A reporter: itself.

    Examples
    --------
    >>> import io
    >>> type(resolve_progress(True, io.StringIO())).__name__
    'TerminalProgress'
    >>> type(resolve_progress(None)).__name__
    'NullProgress'
    """
    if progress is None or progress is False:
        return NullProgress()
    if progress is True:
        return progress_reporter("notebook" if in_notebook() else "terminal", stream, label=label)
    if isinstance(progress, str):
        return progress_reporter(progress, stream, label=label)
    if isinstance(progress, ProgressReporter):
        return progress
    raise InvalidArgumentError(
        "progress must be True, False, None, a mode or a ProgressReporter, "
        f"not {type(progress).__name__}"
    )


# -- waiting for a query -------------------------------------------------------------------
def _fingerprint(p: Mapping[str, Any]) -> str:
    # an idle trigger and the batch that later runs share (runId, batchId); they differ
    # in timestamp and in what they read
    return f"{p.get('timestamp')}|{p.get('numInputRows')}"


def _feed(query: QueryLike, reporter: ProgressReporter, seen: set[tuple[str, int, str]]) -> None:
    try:
        entries: Iterable[Any] = query.recentProgress or []
    except Exception:
        # the display is a nicety: a failed look at the progress must not end the run
        return
    for entry in entries:
        p = progress_as_dict(entry)
        mark = (*_key(p), _fingerprint(p))
        if mark in seen:
            continue
        seen.add(mark)
        reporter.update(p)


def watch(
    query: QueryLike,
    reporter: ProgressReporter,
    poll_seconds: float = 0.5,
    timeout: float | None = None,
    *,
    clock: _Clock = time.monotonic,
) -> bool:
    """Wait for a streaming query, feeding its new progress to ``reporter``.

    Loops on ``query.awaitTermination(poll_seconds)``; after each wait it passes the
    entries of ``query.recentProgress`` not seen before to ``reporter.update``, oldest
    first. Entries are told apart by ``(runId, batchId)`` and timestamp: an idle trigger
    and the batch that ran under the same id are both passed (the reporter keeps the
    batch, see :class:`ProgressTotals`), and calls ``reporter.refresh()`` if the reporter has one. It does
    not close the reporter.

    Parameters
    ----------
    query
        A ``StreamingQuery``, or anything with ``awaitTermination(timeout)`` and
        ``recentProgress``.
    reporter
        Receives the progress.
    poll_seconds
        The longest wait between looks at the progress.
    timeout
        Give up after this many seconds; None waits until the query ends.
    clock
        Seconds, for the timeout; :func:`time.monotonic` by default.

    Returns
    -------
    bool
        True if the query terminated, False if ``timeout`` passed first.

    Raises
    ------
    Exception
        Whatever ``awaitTermination`` raised (a failed query's
        ``StreamingQueryException``), unchanged, after the last progress was fed.

    Examples
    --------
    >>> class Query:
    ...     recentProgress = [{"runId": "r", "batchId": 0, "numInputRows": 3}]
    ...     def awaitTermination(self, timeout=None):
    ...         return True
    >>> totals = ProgressTotals()
    >>> class Count(NullProgress):
    ...     def update(self, progress): totals.add(progress)
    >>> watch(Query(), Count())
    True
    >>> totals.records_in
    3
    """
    if poll_seconds <= 0:
        raise InvalidArgumentError(f"poll_seconds must be positive, not {poll_seconds}")
    if timeout is not None and timeout < 0:
        raise InvalidArgumentError(f"timeout must be None or >= 0, not {timeout}")
    deadline = None if timeout is None else clock() + timeout
    seen: set[tuple[str, int, str]] = set()
    refresh = getattr(reporter, "refresh", None)
    while True:
        wait = poll_seconds
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - clock()))
        try:
            done = bool(query.awaitTermination(wait))
        except BaseException:
            # show the batches before the failure, but never let that hide the failure
            try:
                _feed(query, reporter, seen)
            except Exception:
                pass
            raise
        _feed(query, reporter, seen)
        if done:
            return True
        if deadline is not None and clock() >= deadline:
            return False
        if callable(refresh):
            refresh()
