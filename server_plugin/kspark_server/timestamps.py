"""Records without a valid timestamp under ``timestamp_policy="use-partition-time"``.

Kafka Streams' ``UsePartitionTimeOnInvalidTimestamp`` gives a record with an invalid
(negative) timestamp its partition's time: the largest timestamp processed from that
partition so far. kspark's sources turn such timestamps into nulls under that policy
(``kspark.compiler.lowering.timestamps``), and a stateful operator, which keeps time per task, fills
them in before it orders its batch: within each input ``(topic, partition)``, in offset
order, a null takes the largest timestamp before it in that partition, or, for the first
records, the task's stream time as of the batch's start. With neither, the time is unknown
and the record cannot be placed: as in Kafka Streams, that stops the app with an error
naming the record.

Examples
--------
>>> import pandas as pd
>>> f = pd.DataFrame({"timestamp": [None, 5, None, 3, None], "topic": ["t"] * 5,
...                   "partition": [0, 0, 0, 0, 1], "ks_seq": [1, 2, 3, 4, 1], "ks_sub": 0})
>>> fill_partition_time(f, stream_time=2, processor="J")["timestamp"].tolist()
[2, 5, 5, 3, 2]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kspark_server.handling import ProcessingFailed

if TYPE_CHECKING:
    import pandas as pd


def fill_partition_time(frame: pd.DataFrame, stream_time: int | None, processor: str) -> Any:
    """``frame`` with each null ``timestamp`` set to its partition's time (see the module);
    ``frame`` itself if it has none."""
    ts = frame["timestamp"]
    if not ts.isna().any():
        return frame
    out = frame.copy()
    order = np.lexsort(
        (
            out["ks_sub"].to_numpy(dtype="int64", na_value=0),
            out["ks_seq"].to_numpy(dtype="int64", na_value=0),
        )
    )
    seed = -1 if stream_time is None else int(stream_time)
    values = out["timestamp"].to_numpy(dtype="float64", na_value=np.nan)
    filled = values.copy()
    groups = out.groupby(["topic", "partition"], dropna=False, sort=False).indices
    position = np.empty(len(out), dtype="int64")
    position[order] = np.arange(len(out))
    for rows in groups.values():
        rows = rows[np.argsort(position[rows])]  # offset order within the partition
        time = seed
        for r in rows:
            v = values[r]
            if np.isnan(v):
                if time < 0:
                    offset = out["offset"].iat[r] if "offset" in out else None
                    raise ProcessingFailed(
                        f"{processor}: the record (topic={out['topic'].iat[r]} "
                        f"partition={out['partition'].iat[r]} offset={offset}) has no valid "
                        "timestamp, and timestamp_policy='use-partition-time' found no "
                        "partition time for it yet (no earlier record of its partition, no "
                        "stream time in its task). Set StreamsConfig(timestamp_policy='skip') "
                        "to drop such records, or give them timestamps"
                    )
                filled[r] = time
            else:
                time = max(time, int(v))
    out["timestamp"] = filled.astype("int64")
    return out
