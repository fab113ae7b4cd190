"""kspark's figures from Spark's query progress: the one place that reads a progress.

Spark reports each micro-batch of a streaming query as a ``StreamingQueryProgress``. This
module turns those into kspark's figures, and everything that shows or returns such figures
reads them here: :meth:`StreamsApp.metrics <kspark.StreamsApp.metrics>`, the
:class:`~kspark.runtime.app.RunReport` of ``run_until_caught_up``, the progress display and
``kspark status``. The rules:

- A micro-batch is known by ``(runId, batchId)``. A later progress under the same key
  replaces an earlier one, except that an idle trigger (:func:`is_idle`) never replaces a
  batch that ran; idle triggers are not counted as batches.
- Records in count each source's records once (:func:`input_rows`), records out are those
  written to sinks, and a record sent to the dead-letter queue counts as dropped too.
- Counters (drops, duplicates, expired puts) add up over a batch's side rows.
- Store gauges (``store_entries`` after a batch, ``loaded_entries`` as a restarted run
  loaded them) count once per ``(store, task)`` and batch: a store that two sinks' plans
  share runs as two copies of one operator, which hold the same entries and report the
  same count (the larger is kept should they differ, so the figure does not depend on the
  order in which Spark lists the observations). Over batches, a store's entries are each
  task's count in the last batch that task ran in: a task that receives no records does
  not run and keeps its entries.

Examples
--------
>>> b = Batches()
>>> b.add({"runId": "r", "batchId": 0, "numInputRows": 5, "durationMs": {"addBatch": 9},
...        "observedMetrics": {"kspark": {"records": 4, "side": [
...            {"kind": "dlq", "processor": "p", "task": "0_0", "count": 1}]}}})
True
>>> m = Metrics.of(b.figures())
>>> m.batches, m.input_records, m.output_records, m.dead_letter_records
(1, 5, 4, 1)
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from kspark.errors import InvalidArgumentError

__all__ = [
    "INPUT_METRICS_PREFIX",
    "OBSERVED_METRICS",
    "BatchFigures",
    "Batches",
    "Metrics",
    "Totals",
    "batch_ms",
    "input_rows",
    "is_idle",
    "observed",
    "progress_as_dict",
    "progress_key",
    "rows_per_second",
]

#: The name under which the compiled query observes its metrics. It must equal
#: ``kspark.compiler.lowering.SIDE_METRICS`` (a unit test checks); it is repeated here so that
#: this module does not import the compiler, and with it pyspark.
OBSERVED_METRICS = "kspark"

#: The prefix of the observations that count each source's records; it must equal
#: ``kspark.compiler.lowering.INPUT_METRICS_PREFIX`` (a unit test checks).
INPUT_METRICS_PREFIX = "kspark_in:"

#: Side-row kinds that are gauges of a store, one count per (store, task) and batch.
_GAUGES = (
    "store_entries",
    "loaded_entries",
    "local_reused",
    "local_caught_up",
    "local_rebuilt",
    "local_promoted",
)


# -- reading one progress ------------------------------------------------------------------
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


def progress_key(p: Mapping[str, Any]) -> tuple[str, int]:
    """``(runId, batchId)``: what tells micro-batches apart.

    Examples
    --------
    >>> progress_key({"runId": "r", "batchId": 3}), progress_key({})
    (('r', 3), ('None', -1))
    """
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


def batch_ms(p: Mapping[str, Any]) -> int | None:
    """How long one micro-batch took, in milliseconds, if the progress says.

    Examples
    --------
    >>> batch_ms({"batchDuration": 1500}), batch_ms({"durationMs": {"triggerExecution": 9}})
    (1500, 9)
    """
    if p.get("batchDuration") is not None:
        return _int(p.get("batchDuration"))
    duration = p.get("durationMs") or {}
    if isinstance(duration, Mapping) and duration.get("triggerExecution") is not None:
        return _int(duration.get("triggerExecution"))
    return None


def rows_per_second(p: Mapping[str, Any]) -> float:
    """The rate one micro-batch processed its records at: :func:`input_rows` over the
    batch's duration.

    The progress that reaches a Spark Connect client (pyspark's JSON form) has no
    top-level ``processedRowsPerSecond`` (issue 21: a batch of 1,134 rows showed as
    0 rows/s); its sources carry their own, which serve when the duration is missing.

    Examples
    --------
    >>> rows_per_second({"numInputRows": 1134, "durationMs": {"triggerExecution": 500}})
    2268.0
    >>> rows_per_second({"sources": [{"numInputRows": 5, "processedRowsPerSecond": 2.5},
    ...                              {"numInputRows": 1, "processedRowsPerSecond": 0.5}]})
    3.0
    >>> rows_per_second({"numInputRows": 0, "processedRowsPerSecond": 0.0})
    0.0
    """
    ms = batch_ms(p)
    if ms:
        return input_rows(p) * 1000.0 / ms
    if p.get("processedRowsPerSecond") is not None:
        return float(p["processedRowsPerSecond"])
    sources = p.get("sources")
    if isinstance(sources, list):
        return float(
            sum(
                float(s.get("processedRowsPerSecond") or 0)
                for s in sources
                if isinstance(s, Mapping)
            )
        )
    return 0.0


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


# -- one batch's figures -------------------------------------------------------------------
_Side = tuple[str, str, str]  # (kind, processor or store, task)


@attrs.frozen(kw_only=True)
class BatchFigures:
    """kspark's figures of one micro-batch.

    ``side`` maps ``(kind, processor, task)`` to its count: counters summed over the
    batch's side rows, gauges (``store_entries``, ``loaded_entries``, keyed by store) once
    per store and task (see the module's rules).
    """

    ran: bool
    records_in: int
    records_out: int
    side: Mapping[_Side, int]
    #: ``(processor, reason)`` -> records dropped (or dead-lettered) for that reason
    reasons: Mapping[tuple[str, str], int] = attrs.field(factory=dict)

    @classmethod
    def of(cls, p: Mapping[str, Any]) -> BatchFigures:
        obs = observed(p)
        side: dict[_Side, int] = defaultdict(int)
        reasons: dict[tuple[str, str], int] = defaultdict(int)
        for s in obs.get("side") or []:
            if not isinstance(s, Mapping):
                continue
            key = (str(s.get("kind")), str(s.get("processor")), str(s.get("task")))
            count = _int(s.get("count"))
            side[key] = max(side[key], count) if key[0] in _GAUGES else side[key] + count
            if key[0] in ("dropped", "dlq"):
                reasons[(key[1], str(s.get("reason") or "unknown"))] += count
        return cls(
            ran=not is_idle(p),
            records_in=input_rows(p),
            records_out=_int(obs.get("records")),
            side=dict(side),
            reasons=dict(reasons),
        )

    def total(self, *kinds: str) -> int:
        """The counts of the side rows of ``kinds``, summed."""
        return sum(n for (kind, _, _), n in self.side.items() if kind in kinds)

    def by_key(self, kind: str) -> dict[tuple[str, str], int]:
        """``(processor or store, task)`` -> count, for the side rows of ``kind``."""
        return {(p, t): n for (k, p, t), n in self.side.items() if k == kind}


@attrs.define
class Totals:
    """Counts over micro-batches: batches that ran, records in and out, and records
    dropped (``dead_letters`` of them to the dead-letter queue) or removed as duplicates."""

    batches: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: int = 0
    duplicates: int = 0
    dead_letters: int = 0

    @classmethod
    def of(cls, batches: Iterable[BatchFigures]) -> Totals:
        t = cls()
        for b in batches:
            t.add(b)
        return t

    def add(self, b: BatchFigures, sign: int = 1) -> None:
        """Count ``b`` in (``sign=-1``: take it out again)."""
        self.batches += sign * int(b.ran)
        self.records_in += sign * b.records_in
        self.records_out += sign * b.records_out
        self.dropped += sign * b.total("dropped", "dlq")  # a dead letter was dropped too
        self.duplicates += sign * b.total("duplicates")
        self.dead_letters += sign * b.total("dlq")


# -- many batches --------------------------------------------------------------------------
class Batches:
    """The micro-batches seen so far, by ``(runId, batchId)``, with running :attr:`totals`.

    Examples
    --------
    >>> b = Batches()
    >>> b.add({"runId": "r", "batchId": 0, "numInputRows": 0})
    True
    >>> b.add({"runId": "r", "batchId": 0, "numInputRows": 100})  # replaces the idle one
    True
    >>> b.add({"runId": "r", "batchId": 0, "numInputRows": 0})  # idle again: ignored
    False
    >>> b.totals.batches, b.totals.records_in
    (1, 100)
    """

    def __init__(self) -> None:
        self._progress: dict[tuple[str, int], dict[str, Any]] = {}
        self._figures: dict[tuple[str, int], BatchFigures] = {}
        self.totals = Totals()

    def add(self, progress: Mapping[str, Any]) -> bool:
        """Take in one progress; False if it was an idle trigger kept out by the batch that
        ran under its key."""
        p = dict(progress)
        key = progress_key(p)
        new, old = BatchFigures.of(p), self._figures.get(key)
        if old is not None:
            if old.ran and not new.ran:
                return False
            self.totals.add(old, sign=-1)
        self.totals.add(new)
        self._progress[key], self._figures[key] = p, new
        return True

    def keys(self) -> list[tuple[str, int]]:
        """The batches' keys, oldest first (by progress timestamp, then batch id)."""
        return sorted(self._progress, key=lambda k: (str(self._progress[k].get("timestamp")), k))

    def progress(self) -> list[dict[str, Any]]:
        """Every batch's progress, oldest first."""
        return [self._progress[k] for k in self.keys()]

    def by_key(self) -> Mapping[tuple[str, int], Mapping[str, Any]]:
        return self._progress

    def figures(self, keys: Iterable[tuple[str, int]] | None = None) -> Iterator[BatchFigures]:
        """The figures of the batches of ``keys`` (all by default), oldest first."""
        for key in self.keys() if keys is None else keys:
            yield self._figures[key]


@attrs.frozen(kw_only=True)
class Metrics:
    """Counts over the app's micro-batches, from Spark's query progress.

    ``dropped_records_total`` maps ``(processor, task_id)`` to records dropped by exception
    handlers (``dropped-records-total`` in Kafka Streams). ``duplicates_dropped`` maps
    ``(processor, task_id)`` to duplicates removed by deduplication. ``store_entries``
    maps ``(store, task_id)`` to the entries after the last batch that task ran in.
    """

    batches: int
    input_records: int
    output_records: int
    dropped_records_total: dict[tuple[str, str], int]
    duplicates_dropped: dict[tuple[str, str], int]
    store_entries: dict[tuple[str, str], int]
    expired_puts: dict[tuple[str, str], int]
    dead_letter_records: int
    #: ``(processor, task_id)`` to records a windowed operator dropped as late (their
    #: window had closed); they are in ``dropped_records_total`` too
    late_records: dict[tuple[str, str], int] = attrs.field(factory=dict)
    #: ``(processor, reason)`` -> records dropped for that reason (the codes of
    #: ``kspark_server.handling.DROP_REASONS``, listed in docs/errors.md)
    dropped_reasons: dict[tuple[str, str], int] = attrs.field(factory=dict)

    @classmethod
    def of(cls, batches: Iterable[BatchFigures]) -> Metrics:
        """The metrics of ``batches``, oldest first."""
        totals = Totals()
        per_kind: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
        entries: dict[tuple[str, str], int] = {}
        reasons: dict[tuple[str, str], int] = defaultdict(int)
        for b in batches:
            totals.add(b)
            for at, n in b.reasons.items():
                reasons[at] += n
            for (kind, proc, task), n in b.side.items():
                if kind == "store_entries":
                    entries[(proc, task)] = n  # a gauge: the latest count
                else:
                    per_kind[kind][(proc, task)] += n
        dropped: dict[tuple[str, str], int] = defaultdict(int)
        # a record sent to the dead-letter queue was dropped (late records are counted as
        # dropped by their operator, under "dropped", and again under their own kind)
        for kind in ("dropped", "dlq"):
            for key, n in per_kind[kind].items():
                dropped[key] += n
        return cls(
            batches=totals.batches,
            input_records=totals.records_in,
            output_records=totals.records_out,
            dropped_records_total=dict(dropped),
            duplicates_dropped=dict(per_kind["duplicates"]),
            store_entries=entries,
            expired_puts=dict(per_kind["expired_puts"]),
            dead_letter_records=totals.dead_letters,
            late_records=dict(per_kind["late_records"]),
            dropped_reasons=dict(reasons),
        )

    def dropped_by_reason(self) -> dict[tuple[str, str], int]:
        """``(processor, reason)`` -> records dropped there for that reason.

        Examples
        --------
        >>> m = Metrics(batches=1, input_records=3, output_records=1,
        ...             dropped_records_total={("j", "0_0"): 2}, duplicates_dropped={},
        ...             store_entries={}, expired_puts={}, dead_letter_records=0,
        ...             dropped_reasons={("j", "null-key"): 1, ("j", "expired-put"): 1})
        >>> m.dropped_by_reason()[("j", "null-key")]
        1
        """
        return dict(self.dropped_reasons)

    def dropped_by_processor(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (proc, _), n in self.dropped_records_total.items():
            out[proc] += n
        return dict(out)

    def by_name(self) -> dict[str, int]:
        """The figures under the metric names of Kafka Streams, summed over processors,
        stores and tasks; names without a Kafka Streams counterpart follow its style
        (docs/errors.md, "Metrics", has the table).

        Examples
        --------
        >>> m = Metrics(batches=2, input_records=10, output_records=8,
        ...             dropped_records_total={("p", "0_0"): 1, ("p", "0_1"): 1},
        ...             duplicates_dropped={}, store_entries={("s", "0_0"): 5},
        ...             expired_puts={}, dead_letter_records=1)
        >>> m.by_name()["dropped-records-total"], m.by_name()["records-consumed-total"]
        (2, 10)
        """
        return {
            # Kafka Streams' names: a micro-batch commits like a Kafka Streams commit
            "commit-total": self.batches,
            "process-total": self.input_records,
            "records-consumed-total": self.input_records,
            "records-produced-total": self.output_records,
            "dropped-records-total": sum(self.dropped_records_total.values()),
            "estimate-num-keys": sum(self.store_entries.values()),
            # kspark's own, in the same style
            "duplicates-dropped-total": sum(self.duplicates_dropped.values()),
            "expired-puts-total": sum(self.expired_puts.values()),
            "late-records-dropped-total": sum(self.late_records.values()),
            "dead-letter-records-total": self.dead_letter_records,
        }

    def as_dict(self) -> dict[str, Any]:
        """Flat, Kafka-like metric names."""
        return {
            "batches": self.batches,
            "input-records-total": self.input_records,
            "output-records-total": self.output_records,
            "dropped-records-total": sum(self.dropped_records_total.values()),
            "duplicates-dropped-total": sum(self.duplicates_dropped.values()),
            "dead-letter-records-total": self.dead_letter_records,
        }
