"""Progress display: totals, terminal and notebook reporters, and ``watch`` on fake queries.

No Spark: the queries are fakes and the clocks are lists the tests move by hand.
"""

from __future__ import annotations

import doctest
import io
import json
import sys
import types
from collections.abc import Mapping
from typing import Any

import pytest

from kspark.errors import InvalidArgumentError
from kspark.runtime import display
from kspark.runtime import metrics as km
from kspark.runtime import progress as pr
from kspark.runtime.display import NotebookProgress, NullProgress, ProgressTotals, TerminalProgress
from kspark.runtime.metrics import progress_as_dict
from kspark.runtime.progress import ProgressReporter, progress_reporter, resolve_progress, watch


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def batch(
    batch_id: int,
    rows: int,
    *,
    run: str = "run-1",
    ms: int = 1000,
    out: int | None = None,
    side: list[dict[str, Any]] | None = None,
    ts: str | None = None,
) -> dict[str, Any]:
    """A progress shaped like Spark's StreamingQueryProgress JSON."""
    p: dict[str, Any] = {
        "id": "q-1",
        "runId": run,
        "name": "payments",
        "timestamp": ts or f"2025-01-01T00:00:{batch_id:02d}.000Z",
        "batchId": batch_id,
        "batchDuration": ms,
        "numInputRows": rows,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": float(rows),
        "durationMs": {"addBatch": ms - 10, "triggerExecution": ms},
        "stateOperators": [],
        "sources": [
            {
                "description": "FileStreamSource[/in]",
                "startOffset": {"logOffset": batch_id - 1} if batch_id else None,
                "endOffset": {"logOffset": batch_id},
                "latestOffset": None,
                "numInputRows": rows,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": float(rows),
            },
        ],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    }
    if out is not None or side is not None:
        p["observedMetrics"] = {"kspark": {"records": out or 0, "side": side or []}}
    return p


def idle(
    batch_id: int, *, run: str = "run-1", ts: str = "2025-01-01T00:09:00.000Z"
) -> dict[str, Any]:
    """A trigger that found no new data: no addBatch."""
    p = batch(batch_id, 0, run=run, ts=ts)
    p["durationMs"] = {"latestOffset": 3, "triggerExecution": 3}
    p["batchDuration"] = 3
    return p


# -- reading progress ----------------------------------------------------------------------
def test_observed_metrics_name_matches_the_compiler() -> None:
    from kspark.compiler.lowering import SIDE_METRICS

    assert km.OBSERVED_METRICS == SIDE_METRICS


def test_progress_as_dict_accepts_dicts_json_objects_and_pyspark_progress() -> None:
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    raw = batch(
        3,
        10,
        out=9,
        side=[{"kind": "dropped", "processor": "p", "task": "0_1", "count": 1, "chunk": 0}],
    )
    raw["id"] = raw["runId"] = "8a1c5e0e-0000-4000-8000-000000000001"
    raw["eventTime"] = {}
    spark_progress = StreamingQueryProgress.fromJson(raw)
    as_dict = progress_as_dict(spark_progress)
    assert as_dict["batchId"] == 3 and as_dict["runId"] == raw["runId"]
    assert km.observed(as_dict) == {
        "records": 9,
        "side": raw["observedMetrics"]["kspark"]["side"],
    }

    class WithJson:
        json = json.dumps({"batchId": 1})

    assert progress_as_dict(WithJson()) == {"batchId": 1}
    assert progress_as_dict({"batchId": 2}) == {"batchId": 2}
    with pytest.raises(InvalidArgumentError):
        progress_as_dict(42)


def test_input_metrics_prefix_matches_the_compiler() -> None:
    from kspark.compiler.lowering import INPUT_METRICS_PREFIX

    assert km.INPUT_METRICS_PREFIX == INPUT_METRICS_PREFIX


def test_forked_source_is_counted_once() -> None:
    # what Spark reports for one file source that feeds two sinks (a stream scanned
    # twice): the source once, with both scans' rows; kspark's observations say 10
    p = batch(0, 20, out=20)
    p["sources"] = [{"description": "FileStreamSource[/in]", "numInputRows": 20}]
    p["observedMetrics"]["kspark_in:KSTREAM-SOURCE-0000000000"] = {"records": 10}
    assert km.input_rows(p) == 10
    # two sources, one observation each; the [values, schema] JSON form too
    p["observedMetrics"]["kspark_in:KTABLE-SOURCE-0000000003"] = [
        [2],
        {"type": "struct", "fields": [{"name": "records", "type": "long"}]},
    ]
    assert km.input_rows(p) == 12
    # a progress without kspark's observations (an idle trigger): Spark's count
    assert km.input_rows(batch(1, 7)) == 7


@pytest.mark.parametrize(
    "metrics",
    [
        {"records": 4, "side": [{"kind": "dlq", "processor": "p", "task": "t", "count": 2}]},
        # Spark's [values, schema] JSON form of an observed Row
        [
            [[["dlq", "p", "t", 2, 0]], 4],
            {
                "type": "struct",
                "fields": [
                    {
                        "name": "side",
                        "type": {
                            "type": "array",
                            "elementType": {
                                "type": "struct",
                                "fields": [
                                    {"name": n, "type": "string"}
                                    for n in ("kind", "processor", "task", "count", "chunk")
                                ],
                            },
                        },
                    },
                    {"name": "records", "type": "long"},
                ],
            },
        ],
    ],
)
def test_observed_metrics_decode_in_every_form(metrics: Any) -> None:
    # the app, its status and the display all read the observations with km.observed
    p = {"observedMetrics": {"kspark": metrics}}
    obs = km.observed(p)
    assert obs["records"] == 4
    assert [(s["kind"], s["processor"], s["task"], int(s["count"])) for s in obs["side"]] == [
        ("dlq", "p", "t", 2)
    ]
    totals = ProgressTotals(clock=Clock())
    totals.add({"runId": "r", "batchId": 0, **p})
    assert (totals.records_out, totals.dropped, totals.dead_letters) == (4, 2, 2)


def test_totals_count_batches_records_and_replace_an_idle_trigger() -> None:
    clock = Clock()
    totals = ProgressTotals(clock=clock)
    totals.add(
        batch(
            0,
            100,
            out=90,
            side=[
                {"kind": "dropped", "processor": "p", "task": "0_0", "count": 3},
                {"kind": "duplicates", "processor": "d", "task": "0_0", "count": 7},
            ],
        )
    )
    totals.add(idle(1))  # an idle trigger under the id of the next batch
    totals.add(batch(1, 50, out=50))  # the batch that ran under that id replaces it
    totals.add(idle(1, ts="2025-01-01T00:10:00.000Z"))  # idle after it: does not replace it
    totals.add(idle(2))  # idle only: not a batch
    clock.now = 5.0
    assert totals.batches == 2
    assert (totals.records_in, totals.records_out) == (150, 140)
    assert (totals.dropped, totals.duplicates, totals.dead_letters) == (3, 7, 0)
    assert totals.records_per_second() == 30.0
    line = totals.line()
    assert line == (
        "2 batches, 150 records in, 30 records/s, last batch 1.0s, elapsed 5.0s; "
        "140 out, 3 dropped, 7 duplicates"
    )


def test_state_rows_are_shown_when_the_query_has_state() -> None:
    p = batch(0, 10)
    p["stateOperators"] = [{"numRowsTotal": 1200}, {"numRowsTotal": 34}]
    totals = ProgressTotals(clock=Clock(1.0))
    totals.add(p)
    assert "1,234 state rows" in totals.line()


# -- terminal ------------------------------------------------------------------------------
def test_log_output_is_rate_limited_but_shows_first_batch_phases_and_final_state() -> None:
    out, clock = io.StringIO(), Clock()
    r = TerminalProgress(out, label="payments", clock=clock)  # StringIO: not a terminal
    assert not r.tty and r.min_interval == 10.0
    r.phase("restoring state")
    for i in range(1, 6):  # five batches within ten seconds
        clock.now = float(i)
        r.update(batch(i - 1, 1000))
    r.refresh()  # still within the interval: nothing
    lines = out.getvalue().splitlines()
    assert lines[0] == "payments: restoring state"
    assert lines[1].startswith("payments: 1 batch, 1,000 records in")
    assert len(lines) == 2
    clock.now = 12.0
    r.refresh()  # the held-back batches are written once the interval has passed
    r.refresh()  # and only once
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "5 batches, 5,000 records in" in lines[2]
    clock.now = 13.0
    r.update(batch(5, 1000))
    r.close("6 micro-batch(es), 6,000 records in")
    lines = out.getvalue().splitlines()
    assert "6 batches, 6,000 records in" in lines[3]
    assert lines[4] == "payments: 6 micro-batch(es), 6,000 records in"
    assert "\r" not in out.getvalue()
    r.update(batch(6, 1))  # closed: ignored
    r.close("again")
    assert len(out.getvalue().splitlines()) == 5


def test_log_close_writes_nothing_new_when_the_last_state_was_shown() -> None:
    out, clock = io.StringIO(), Clock()
    r = TerminalProgress(out, clock=clock)
    clock.now = 2.0
    r.update(batch(0, 10, out=10))
    r.close()
    assert out.getvalue() == (
        "1 batch, 10 records in, 5 records/s, last batch 1.0s, elapsed 2.0s; 10 out\n"
    )


def test_terminal_rewrites_one_line() -> None:
    out, clock = TTY(), Clock()
    r = TerminalProgress(out, label="demo", clock=clock, width=200)
    assert r.tty
    r.phase("restoring state")
    assert out.getvalue() == "\rdemo: restoring state"
    clock.now = 1.0
    r.update(batch(0, 12_000, ms=800))
    clock.now = 1.05  # within min_interval: not redrawn
    r.update(batch(1, 8_000))
    clock.now = 2.0
    r.update(batch(2, 10_000))
    text = out.getvalue()
    assert "\n" not in text
    frames = text.split("\r")[1:]
    assert len(frames) == 3
    assert (
        frames[1].startswith("demo: 1 batch, 12,000 records in")
        and "[restoring state]" in frames[1]
    )
    assert "3 batches, 30,000 records in, 15,000 records/s" in frames[2]
    r.phase(None)
    r.close("done")
    final = out.getvalue().split("\r")[-1]
    assert final.endswith("\ndemo: done\n")
    assert "[restoring state]" not in final


def test_terminal_pads_a_shorter_line_and_cuts_to_the_width() -> None:
    out, clock = TTY(), Clock(1.0)
    r = TerminalProgress(out, clock=clock, width=30)
    r.phase("a long phase name that is cut at thirty")
    first = out.getvalue().split("\r")[-1]
    assert len(first) == 30
    r.phase("short")
    second = out.getvalue().split("\r")[-1]
    assert second == "short" + " " * 25


def test_terminal_without_batches_shows_only_phases_and_leaves_no_line() -> None:
    out, clock = TTY(), Clock()
    r = TerminalProgress(out, label="app", clock=clock, width=200)
    r.refresh()  # nothing to show yet
    assert out.getvalue() == ""
    r.phase("restoring state")
    r.phase(None)  # wiped, not replaced by a row of zeros
    assert out.getvalue() == "\rapp: restoring state\r" + " " * 20
    r.update(batch(0, 5))  # right after the phase: still drawn at once
    assert out.getvalue().split("\r")[-1].startswith("app: 1 batch, 5 records in")
    out2 = TTY()
    r2 = TerminalProgress(out2, clock=clock, width=200)
    r2.phase("compiling")
    r2.close()
    assert "\n" not in out2.getvalue() and out2.getvalue().endswith("\r")


def test_terminal_refresh_redraws_the_clock_at_most_once_a_second() -> None:
    out, clock = TTY(), Clock()
    r = TerminalProgress(out, clock=clock, width=200)
    r.update(batch(0, 1))
    clock.now = 0.5
    r.refresh()
    assert out.getvalue().count("\r") == 1
    clock.now = 1.5
    r.refresh()
    assert out.getvalue().count("\r") == 2 and "elapsed 1.5s" in out.getvalue()


# -- notebook ------------------------------------------------------------------------------
class FakeDisplay:
    def __init__(self) -> None:
        self.shown: list[Any] = []
        self.updates: list[Any] = []

    def __call__(self, obj: Any, display_id: bool = False) -> FakeDisplay:
        assert display_id is True
        self.shown.append(obj)
        return self

    def update(self, obj: Any) -> None:
        self.updates.append(obj)


def test_notebook_display_is_updated_in_place() -> None:
    display, clock = FakeDisplay(), Clock()
    r = NotebookProgress(label="<payments>", display=display, clock=clock)
    r.phase("restoring state")
    assert len(display.shown) == 1 and not display.updates
    clock.now = 1.0
    r.update(batch(0, 500, out=480))
    clock.now = 1.1  # within min_interval: not sent
    r.update(batch(1, 500))
    clock.now = 2.0
    r.update(batch(2, 1000))
    assert len(display.shown) == 1 and len(display.updates) == 2
    latest = display.updates[-1]
    page = latest._repr_html_()
    assert "&lt;payments&gt; running" in page and "<payments>" not in page
    assert "2,000" in page and "restoring state" in page
    assert "3 batches, 2,000 records in" in repr(latest)
    r.close("3 micro-batch(es), 2,000 records in")
    final = display.updates[-1]
    assert "finished" in final._repr_html_() and "3 micro-batch(es)" in final._repr_html_()
    assert repr(final).endswith("\n3 micro-batch(es), 2,000 records in")
    r.close()
    assert len(display.updates) == 3


def _fake_ipython(monkeypatch: pytest.MonkeyPatch, shell: object | None) -> FakeDisplay:
    display = FakeDisplay()
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: shell  # type: ignore[attr-defined]
    ipython_display = types.ModuleType("IPython.display")
    ipython_display.display = display  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", ipython_display)
    return display


def test_auto_picks_the_notebook_inside_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel_shell = types.SimpleNamespace(kernel=object())
    display = _fake_ipython(monkeypatch, kernel_shell)
    assert pr.in_notebook()
    r = progress_reporter("auto", TTY(), label="demo")
    assert isinstance(r, NotebookProgress)
    r.update(batch(0, 1))
    assert len(display.shown) == 1
    assert isinstance(resolve_progress(True, io.StringIO()), NotebookProgress)


@pytest.mark.parametrize("shell", [None, types.SimpleNamespace()])
def test_terminal_ipython_is_not_a_notebook(
    monkeypatch: pytest.MonkeyPatch, shell: object | None
) -> None:
    _fake_ipython(monkeypatch, shell)
    assert not pr.in_notebook()
    assert isinstance(progress_reporter("auto", io.StringIO()), NullProgress)


def test_notebook_mode_without_ipython_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "IPython.display", None)  # makes the import fail
    with pytest.raises(InvalidArgumentError, match="IPython"):
        progress_reporter("notebook")


# -- choosing ------------------------------------------------------------------------------
def test_progress_reporter_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert isinstance(progress_reporter("none", TTY()), NullProgress)
    auto_tty = progress_reporter("auto", TTY())
    assert isinstance(auto_tty, TerminalProgress) and auto_tty.tty
    assert isinstance(progress_reporter("auto", io.StringIO()), NullProgress)
    log = progress_reporter("terminal", io.StringIO(), label="x")
    assert isinstance(log, TerminalProgress) and not log.tty and log.label == "x"
    with pytest.raises(InvalidArgumentError):
        progress_reporter("fancy")  # type: ignore[arg-type]


def test_default_stream_is_stderr_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    r = progress_reporter("terminal")
    assert isinstance(r, TerminalProgress) and r.stream is err


def test_resolve_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert isinstance(resolve_progress(None), NullProgress)
    assert isinstance(resolve_progress(False), NullProgress)
    forced = resolve_progress(True, io.StringIO())  # asked for: text even in a log
    assert isinstance(forced, TerminalProgress) and not forced.tty
    assert isinstance(resolve_progress("none"), NullProgress)
    mine = NullProgress()
    assert resolve_progress(mine) is mine
    assert isinstance(mine, ProgressReporter)
    with pytest.raises(InvalidArgumentError):
        resolve_progress(3)  # type: ignore[arg-type]


# -- watch ---------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.refreshes = 0

    def update(self, progress: Mapping[str, Any]) -> None:
        self.seen.append((progress["batchId"], progress["numInputRows"]))

    def phase(self, text: str | None) -> None:
        pass

    def close(self, summary: str | None = None) -> None:
        pass

    def refresh(self) -> None:
        self.refreshes += 1


class FakeQuery:
    """Each wait lets the 'query' make one scripted step: a list of new progress entries,
    or an exception to raise. After the script it has terminated."""

    def __init__(self, script: list[Any], clock: Clock | None = None, keep: int = 100) -> None:
        self.script = list(script)
        self.clock = clock
        self.keep = keep
        self.progress: list[Any] = []
        self.waits: list[float | None] = []

    def awaitTermination(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if self.clock is not None and timeout is not None:
            self.clock.now += timeout
        if not self.script:
            return True
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        self.progress = (self.progress + step)[-self.keep :]
        return False

    @property
    def recentProgress(self) -> list[Any]:
        return list(self.progress)


class JsonProgress:
    def __init__(self, d: dict[str, Any]) -> None:
        self.json = json.dumps(d)


def test_watch_feeds_each_batch_once_and_returns_when_the_query_ends() -> None:
    query = FakeQuery(
        [
            [batch(0, 10)],
            [],
            [batch(1, 20), JsonProgress(idle(2))],
            [JsonProgress(batch(2, 30))],  # replaces the idle entry with the same id
        ],
        keep=2,
    )  # Spark keeps only the last few entries
    rec = Recorder()
    assert watch(query, rec, poll_seconds=0.5) is True
    assert rec.seen == [(0, 10), (1, 20), (2, 0), (2, 30)]
    assert query.waits == [0.5] * 5
    assert rec.refreshes == 4  # once per poll that did not end the run


def test_watch_gives_up_after_the_timeout() -> None:
    clock = Clock()
    query = FakeQuery([[]] * 100, clock=clock)
    assert watch(query, Recorder(), poll_seconds=0.4, timeout=1.0, clock=clock) is False
    assert query.waits == pytest.approx([0.4, 0.4, 0.2])
    assert watch(FakeQuery([[]], clock=clock), Recorder(), timeout=0, clock=clock) is False


def test_watch_with_a_real_terminal_reporter() -> None:
    out, clock = io.StringIO(), Clock()
    query = FakeQuery([[batch(0, 1000)], [batch(1, 3000)]], clock=clock)
    r = TerminalProgress(out, label="app", clock=clock)
    assert watch(query, r, poll_seconds=1.0, clock=clock)
    r.close("2 micro-batch(es)")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("app: 1 batch, 1,000 records in")
    assert lines[1].startswith("app: 2 batches, 4,000 records in, 1,333 records/s")
    assert lines[2] == "app: 2 micro-batch(es)"


def test_watch_reraises_the_query_failure_unchanged_after_feeding_progress() -> None:
    failure = RuntimeError("[STREAM_FAILED] ProcessingFailed: boom")
    query = FakeQuery([[batch(0, 5)], failure])
    query_progress_before_failure = [batch(1, 7)]

    # the failed batch's predecessors are in recentProgress when the failure is raised
    original = query.awaitTermination

    def await_then_fail(timeout: float | None = None) -> bool:
        if query.script and query.script[0] is failure:
            query.progress = query.progress + query_progress_before_failure
        return original(timeout)

    query.awaitTermination = await_then_fail  # type: ignore[method-assign]
    rec = Recorder()
    with pytest.raises(RuntimeError) as info:
        watch(query, rec)
    assert info.value is failure
    assert rec.seen == [(0, 5), (1, 7)]


def test_watch_keeps_the_failure_when_reading_progress_fails_too() -> None:
    failure = KeyError("the query's own error")

    class Broken:
        def awaitTermination(self, timeout: float | None = None) -> bool:
            raise failure

        @property
        def recentProgress(self) -> list[Any]:
            raise ConnectionError("server gone")

    with pytest.raises(KeyError) as info:
        watch(Broken(), Recorder())
    assert info.value is failure


def test_watch_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidArgumentError):
        watch(FakeQuery([]), Recorder(), poll_seconds=0)
    with pytest.raises(InvalidArgumentError):
        watch(FakeQuery([]), Recorder(), timeout=-1)


# -- the modules' examples -----------------------------------------------------------------
def test_docstring_examples() -> None:
    results = [doctest.testmod(m, optionflags=doctest.ELLIPSIS) for m in (pr, display, km)]
    assert sum(r.attempted for r in results) > 10 and not any(r.failed for r in results)
