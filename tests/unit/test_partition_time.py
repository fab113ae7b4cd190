"""timestamp_policy="use-partition-time" in a stateful operator, against a reference model:
a record without a timestamp takes the largest timestamp before it in its partition (in
offset order), or the task's stream time; with neither, the app stops."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kspark_server.handling import ProcessingFailed
from kspark_server.timestamps import fill_partition_time


def _reference(records: list[tuple[int, int | None]], seed: int | None) -> list[int] | None:
    """records: (partition, timestamp or None), in offset order within each partition."""
    time: dict[int, int] = {}
    out = []
    for part, ts in records:
        if ts is None:
            t = time.get(part, seed)
            if t is None:
                return None
            out.append(t)
        else:
            time[part] = max(time.get(part, seed if seed is not None else ts), ts)
            out.append(ts)
    return out


@given(
    records=st.lists(
        st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 50))), max_size=12
    ),
    seed=st.one_of(st.none(), st.integers(0, 50)),
)
def test_nulls_take_their_partitions_time(
    records: list[tuple[int, int | None]], seed: int | None
) -> None:
    frame = pd.DataFrame(
        {
            "timestamp": pd.array([ts for _, ts in records], dtype="Int64"),
            "topic": ["t"] * len(records),
            "partition": [p for p, _ in records],
            "offset": list(range(len(records))),
            "ks_seq": list(range(len(records))),
            "ks_sub": [0] * len(records),
        }
    )
    expected = _reference(records, seed)
    if expected is None:
        with pytest.raises(ProcessingFailed, match="no partition time"):
            fill_partition_time(frame, seed, "P")
        return
    got: Any = fill_partition_time(frame, seed, "P")["timestamp"].tolist()
    assert got == expected
