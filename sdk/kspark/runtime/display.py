"""Progress displays: a line on a terminal or in a log, a table in a notebook.

Each display is a :class:`kspark.runtime.progress.ProgressReporter`; it counts what it
is fed with :class:`ProgressTotals`, whose figures come from
:mod:`kspark.runtime.metrics`. The notebook display uses IPython's
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
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO, cast

from kspark.errors import InvalidArgumentError
from kspark.runtime.metrics import Batches, batch_ms, is_idle

__all__ = [
    "NotebookProgress",
    "NullProgress",
    "ProgressTotals",
    "TerminalProgress",
    "format_seconds",
]

_Clock = Callable[[], float]


class ProgressTotals:
    """Counts over the micro-batches a reporter has seen, with a clock for rates and
    the figures to show.

    The counting is :class:`kspark.runtime.metrics.Batches`'s: a progress with the
    ``(runId, batchId)`` of an earlier one replaces it, unless it is an idle trigger and
    the earlier one ran a batch; idle triggers are not counted as batches.

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
        self._seen = Batches()
        self.last: dict[str, Any] | None = None

    def add(self, progress: Mapping[str, Any]) -> None:
        p = dict(progress)
        if self._seen.add(p) and (not is_idle(p) or self.last is None):
            self.last = p  # "last batch" is one that ran

    @property
    def batches(self) -> int:
        """Micro-batches that ran (idle triggers left out)."""
        return self._seen.totals.batches

    @property
    def records_in(self) -> int:
        return self._seen.totals.records_in

    @property
    def records_out(self) -> int:
        return self._seen.totals.records_out

    @property
    def dropped(self) -> int:
        return self._seen.totals.dropped

    @property
    def duplicates(self) -> int:
        return self._seen.totals.duplicates

    @property
    def dead_letters(self) -> int:
        return self._seen.totals.dead_letters

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
        return sum(int(op.get("numRowsTotal") or 0) for op in ops if isinstance(op, Mapping))

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
        self.tty = is_terminal(self.stream) if tty is None else tty
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


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a closed or detached one)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        return False
