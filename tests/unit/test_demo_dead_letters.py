"""The demo prints where each dead letter came from as a person reads it, never a file
record's synthetic offset (its file's mtime times 2**21 plus its line)."""

from __future__ import annotations

import pandas as pd

from kspark_demo.run import _where


def test_a_file_record_is_shown_by_its_line() -> None:
    mtime_ms = 1_764_000_000_000
    row = pd.Series(
        {"offset": mtime_ms * 2**21 + 9, "topic": "payments", "exception_message": "boom"}
    )
    assert _where(row) == "line 10 of a payments file"
    row["exception_message"] = "does not match, line 10 of /data/in/payments/p-1.jsonl"
    assert _where(row) == "line 10 of /data/in/payments/p-1.jsonl"


def test_a_kafka_record_is_shown_by_its_offset() -> None:
    assert _where(pd.Series({"offset": "42", "value": "x"})) == "offset 42"
