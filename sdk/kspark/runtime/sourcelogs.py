"""Which files a query checkpoint's file sources consumed, source by source.

Spark's ``MicroBatchExecution`` numbers a query's sources twice (sql/core, the
``logicalPlan`` of ``MicroBatchExecution``):

- each *distinct* streaming relation of the analysed plan, in the order a pre-order walk
  meets it first, gets the metadata folder ``sources/<i>`` (a file source's log of the
  files it listed, one batch of its own per micro-batch that found new files);
- the offset log ``offsets/<batch>`` holds one line per *occurrence* of a source in the
  plan, in the same walk's order (``toOffsetSeq(sources, ...)``, where ``sources`` keeps
  repeats): a relation read along two paths of the plan has two equal lines.

So line ``j`` belongs to folder ``f(j)``, where ``f`` numbers the lines' sources by first
occurrence: ``f(0) = 0``, and every later line either repeats a source already seen
(the same value in every batch of the log) or is the next folder. The checkpoint does not
say which lines repeat, so :func:`line_folders` finds every numbering that fits the log and
the folders' own logs (a file source's line is ``{"logOffset": n}``, and its folder's last
log batch is ``n`` or, written for a batch that did not commit, ``n + 1``); a rescale goes
on only when they all agree on every folder's committed offset.

A file is consumed when its log batch is at most its source's logOffset in the last
committed batch: a batch planned and not committed (an app stopped in the middle of one)
logged its files in its sources' logs too, and a new checkpoint generation must read them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from kspark.errors import RescaleError

__all__ = ["consumed_files", "line_folders", "log_offset"]

#: A source's line in an offsets file: its offset as JSON text, None for ``-`` (none yet).
Line = str | None


def log_offset(line: Line) -> int | None:
    """A file source's ``logOffset`` in an offsets line; None for another source's line
    or none.

    >>> log_offset('{"logOffset":3}'), log_offset('{"t":{"0":5}}'), log_offset(None)
    (3, None, None)
    """
    if line is None:
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if isinstance(doc, dict) and set(doc) == {"logOffset"}:
        return int(doc["logOffset"])
    return None


def _fits(line: Line, last_log_batch: int | None) -> bool:
    """Whether ``line`` (in the last committed batch) can be the line of a folder whose
    file-source log ends at ``last_log_batch`` (None: a folder without a file log)."""
    if last_log_batch is None:
        return True
    n = log_offset(line)
    if line is None:
        # nothing committed yet: at most one log batch, of the batch that did not commit
        return last_log_batch == 0
    return n is not None and last_log_batch - 1 <= n <= last_log_batch


def line_folders(
    history: Sequence[Sequence[Line]],
    log_ends: Mapping[int, int],
) -> tuple[Line, ...]:
    """Each source folder's line in the last batch of ``history`` (the offsets files'
    lines, oldest batch first, the last committed batch last), for every numbering of the
    lines by first occurrence that fits them (see the module doc). ``log_ends``: folder ->
    its file-source log's last batch, for the folders that hold one.

    Raises :class:`RescaleError` if no numbering fits, or two that fit disagree.

    Examples
    --------
    A relation read along two paths has two equal lines, and one folder:

    >>> line_folders([['{"logOffset":0}', '{"logOffset":0}', '{"logOffset":0}'],
    ...               ['{"logOffset":1}', '{"logOffset":0}', '{"logOffset":1}']], {0: 1, 1: 0})
    ('{"logOffset":1}', '{"logOffset":0}')

    Each folder's line, as far as the last folder with a file log (a folder without one
    has no files to tell apart: None).
    """
    if not history:
        return ()
    width = len(history[-1])
    rows = [list(r) for r in history if len(r) == width]
    # a line's values over the log: lines of one source are equal in every batch
    vectors = [tuple(r[j] for r in rows) for j in range(width)]
    need = max(log_ends, default=-1) + 1
    results: set[tuple[Line, ...]] = set()
    states: set[tuple[int, ...]] = {()}  # the first line of each folder so far
    for j in range(width):
        nxt: set[tuple[int, ...]] = set()
        for state in states:
            if any(vectors[j] == vectors[first] for first in state):
                nxt.add(state)  # a repeat of a folder already numbered
            folder = len(state)
            if _fits(vectors[j][-1], log_ends.get(folder)):
                nxt.add((*state, j))
        states = nxt
    for state in states:
        if len(state) < need:
            continue
        results.add(tuple(vectors[first][-1] for first in state))
    # only the folders with a file log have files to tell apart: numberings that agree on
    # their lines say the same
    keys = {tuple(r[f] for f in sorted(log_ends)) for r in results}
    if len(keys) != 1:
        raise RescaleError(
            "cannot tell which source each line of the checkpoint's offsets belongs to "
            f"({len(keys)} numberings fit its {width} line(s) and {need} source folder(s)); "
            "nothing was switched"
        )
    found = dict(zip(sorted(log_ends), keys.pop(), strict=True))
    return tuple(found.get(f) for f in range(need))


def consumed_files(
    history: Sequence[Sequence[Line]],
    logs: Mapping[int, Mapping[int, Sequence[str]]],
    settled: bool = False,
) -> set[str]:
    """The files the file sources consumed up to the last batch of ``history`` (the
    offsets files' lines, the last committed batch last). ``logs``: folder -> log batch
    -> the files that log batch lists. ``settled``: no batch was planned after the last
    committed one, so every log batch but one written as the query stopped (between a
    source's listing and the offsets file) belongs to a committed batch; when the lines
    cannot be told apart (:func:`line_folders`), every logged file counts as consumed
    then, and the rescale stops otherwise.

    >>> consumed_files([['{"logOffset":0}']], {0: {0: ["a"], 1: ["b"]}})
    {'a'}
    """
    ends = {f: max(batches) for f, batches in logs.items() if batches}
    try:
        lines = line_folders(history, ends)
    except RescaleError:
        if not settled:
            raise
        return {f for batches in logs.values() for files in batches.values() for f in files}
    out: set[str] = set()
    for folder, batches in logs.items():
        line = lines[folder] if folder < len(lines) else None
        upto = log_offset(line)
        if upto is None:
            continue
        for b, files in batches.items():
            if b <= upto:
                out.update(files)
    return out
