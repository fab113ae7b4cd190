"""How a run reports its progress: the reporter protocol, the choice of a display for
where the code runs, and the loop that feeds a query's progress to a reporter.

A :class:`ProgressReporter` receives each new micro-batch progress of a Spark streaming
query (the plain-dict form of Spark's ``StreamingQueryProgress``) through ``update``, free
text such as ``"restoring state"`` through ``phase``, and a final line through ``close``.
:func:`progress_reporter` picks one of the displays of :mod:`kspark.runtime.display` for
where the code runs, and :func:`watch` waits for a query while feeding its progress to a
reporter. The figures come from :mod:`kspark.runtime.metrics`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TextIO, runtime_checkable

from kspark._typing import ProgressMode
from kspark.errors import InvalidArgumentError
from kspark.runtime.display import NotebookProgress, NullProgress, TerminalProgress, is_terminal
from kspark.runtime.metrics import progress_as_dict, progress_key

__all__ = [
    "ProgressMode",
    "ProgressReporter",
    "QueryLike",
    "in_notebook",
    "progress_reporter",
    "resolve_progress",
    "watch",
]


_Clock = Callable[[], float]


# -- the protocol --------------------------------------------------------------------------
@runtime_checkable
class ProgressReporter(Protocol):
    """Receives a run's progress.

    ``update`` is called once per new micro-batch progress (a mapping with Spark's
    ``StreamingQueryProgress`` keys: ``runId``, ``batchId``, ``numInputRows``,
    ``batchDuration``, ``durationMs``, ``sources``, ``stateOperators``,
    ``observedMetrics``...). A progress with the ``(runId, batchId)`` of an earlier one
    replaces it (see :class:`kspark.runtime.metrics.Batches`). ``phase`` shows a step that is not a micro-batch (None clears it);
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
        if is_terminal(out):
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
        mark = (*progress_key(p), _fingerprint(p))
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
    batch, see :class:`kspark.runtime.metrics.Batches`), and calls ``reporter.refresh()`` if
    the reporter has one. It does
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
    >>> from kspark.runtime.display import ProgressTotals
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
            with contextlib.suppress(Exception):
                _feed(query, reporter, seen)
            raise
        _feed(query, reporter, seen)
        if done:
            return True
        if deadline is not None and clock() >= deadline:
            return False
        if callable(refresh):
            refresh()
