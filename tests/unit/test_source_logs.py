"""Which files a checkpoint's file sources consumed, on synthetic checkpoints laid out as
Spark lays them out: one offsets line per occurrence of a source in the plan, one
``sources/<i>`` folder per distinct source, numbered by first occurrence."""

from __future__ import annotations

import pytest

from kspark.errors import RescaleError
from kspark.runtime.checkpoints import _lines
from kspark.runtime.sourcelogs import consumed_files, line_folders


def offsets(*lines: str) -> str:
    """An offsets file as Spark writes it: the version, the batch's metadata, the lines."""
    return "\n".join(["v1", '{"batchWatermarkMs":0,"batchTimestampMs":1}', *lines])


def lo(n: int) -> str:
    return f'{{"logOffset":{n}}}'


#: A plan of four source occurrences and three folders: the input topic (folder 0), an
#: internal topic read along two paths (folder 1, lines 1 and 3) and another internal
#: topic (folder 2). Folder 1's logOffset stays behind the input's, and batch 4 was
#: planned (each source logged its new files) and did not commit.
HISTORY = [
    offsets(lo(0), "-", "-", "-"),
    offsets(lo(1), lo(0), "-", lo(0)),
    offsets(lo(2), lo(1), lo(0), lo(1)),
    offsets(lo(3), lo(1), lo(1), lo(1)),
]
LOGS = {
    0: {0: ["in/0"], 1: ["in/1"], 2: ["in/2"], 3: ["in/3"], 4: ["in/4"]},
    1: {0: ["a/batch_id=0/x"], 1: ["a/batch_id=1/x"], 2: ["a/batch_id=3/x"]},
    2: {0: ["b/batch_id=1/x"], 1: ["b/batch_id=2/x"], 2: ["b/batch_id=3/x"]},
}


def test_each_folder_gets_its_own_line_and_a_repeated_source_one_folder() -> None:
    history = [_lines(t) for t in HISTORY]
    assert [len(h) for h in history] == [4, 4, 4, 4]
    ends = {f: max(log) for f, log in LOGS.items()}
    assert line_folders(history, ends) == (lo(3), lo(1), lo(1))


def test_files_of_a_batch_that_did_not_commit_are_not_consumed() -> None:
    got = consumed_files([_lines(t) for t in HISTORY], LOGS)
    # batch 4's log batches (in/4, a's 2, b's 2) were planned, not committed; read by line
    # position instead (folder 2 <- line 2 <- logOffset 1, folder 1 <- line 1), the same
    assert got == {
        "in/0",
        "in/1",
        "in/2",
        "in/3",
        "a/batch_id=0/x",
        "a/batch_id=1/x",
        "b/batch_id=1/x",
        "b/batch_id=2/x",
    }


def test_a_file_log_batch_beyond_the_query_batch_number_counts_by_the_sources_offset() -> None:
    """A source's log batches count its own batches, not the query's: a source that had
    files in query batches 0 and 3 logged them as its batches 0 and 1."""
    history = [_lines(offsets(lo(0))), _lines(offsets(lo(0))), _lines(offsets(lo(0)))]
    assert consumed_files(history, {0: {0: ["f0"], 1: ["f3"]}}) == {"f0"}


def test_numberings_that_disagree_are_refused() -> None:
    """Two lines equal in every batch, then another: either the second line repeats the
    first source (folder 1 is the third line's) or it is a source of its own (folder 1 is
    its, the third line's folder has no files yet). Both fit, and folder 1's committed
    offset differs: the rescale stops rather than guess."""
    history = [_lines(offsets(lo(0), lo(0), lo(0))), _lines(offsets(lo(1), lo(1), lo(0)))]
    with pytest.raises(RescaleError, match="cannot tell which source"):
        line_folders(history, {0: 1, 1: 1})
    # with no batch in flight, every logged file was consumed by a committed batch
    assert consumed_files(history, {0: {0: ["p"], 1: ["q"]}, 1: {0: ["r"], 1: ["s"]}}, True) == {
        "p",
        "q",
        "r",
        "s",
    }
    # the folder's log rules one out: a log that ends at 2 was not at 0 when batch 1 ran
    assert line_folders(history, {0: 1, 1: 2}) == (lo(1), lo(1))


def test_a_line_for_a_folder_without_a_file_log_is_kept_apart() -> None:
    """A Kafka source's folder has no file log: its line is told by its text alone."""
    kafka = '{"t":{"0":5}}'
    history = [_lines(offsets(kafka, lo(0))), _lines(offsets(kafka, lo(1)))]
    assert consumed_files(history, {1: {0: ["f0"], 1: ["f1"], 2: ["f2"]}}) == {"f0", "f1"}
