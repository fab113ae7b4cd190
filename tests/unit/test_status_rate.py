"""``kspark status`` shows the rate of the last batch that read records (never ``1134 rows, 0 rows/s``)."""

from __future__ import annotations

from kspark.runtime.app import State
from kspark.runtime.app_status import status_of
from kspark.runtime.handles import SubmittedApp

HANDLE = SubmittedApp(
    app_id="payments",
    remote="sc://localhost:15002",
    session_id="s",
    user_id=None,
    query_id="q-1",
    run_id="r-1",
    checkpoint="/chk",
)


def _progress(batch: int, rows: int) -> dict[str, object]:
    return {
        "runId": "r-1",
        "batchId": batch,
        "timestamp": f"2026-01-01T00:00:0{batch}.000Z",
        "durationMs": {"addBatch": 500, "triggerExecution": 500},
        "sources": [{"description": "FileStreamSource[/in]", "numInputRows": rows}],
    }


def test_the_status_shows_the_last_batch_that_read_source_records() -> None:
    """An app of two sub-topologies follows each batch with input by one that reads only
    its internal topic, and a watermark batch reads nothing: the status shows the rate of
    the last batch with input, not ``0 rows, 0 rows/s``."""

    class Query:
        isActive = True
        status = {"message": "Waiting for data to arrive"}
        id = "q-1"
        runId = "r-1"
        recentProgress = [_progress(4, 0), _progress(5, 1000), _progress(6, 0)]

    st = status_of(Query(), HANDLE)
    assert st.last_batch_id == 6
    assert st.last_progress is not None and st.last_progress["batchId"] == 5
    assert "last input batch 5 at 2026-01-01T00:00:05.000Z: 1000 rows, 2,000 rows/s" in (
        st.summary()
    )


def test_a_run_without_input_shows_its_last_batch() -> None:
    class Query:
        isActive = True
        status = {"message": "Waiting for data to arrive"}
        id = "q-1"
        runId = "r-1"
        recentProgress = [_progress(0, 0), _progress(1, 0)]

    st = status_of(Query(), HANDLE)
    assert st.last_progress is not None and st.last_progress["batchId"] == 1


def test_the_last_batch_rate_is_computed_when_the_progress_lacks_it() -> None:
    class Query:
        """A running query whose progress is pyspark's JSON form over Spark Connect: no
        top-level numInputRows or processedRowsPerSecond, the sources have them."""

        isActive = True
        status = {"message": "Waiting for data to arrive"}
        id = "q-1"
        runId = "r-1"
        recentProgress = [
            {
                "runId": "r-1",
                "batchId": 3,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "durationMs": {"addBatch": 500, "triggerExecution": 600},
                "sources": [
                    {
                        "description": "FileStreamSource[/in]",
                        "numInputRows": 1134,
                        "processedRowsPerSecond": 1890.0,
                    }
                ],
            }
        ]

    st = status_of(Query(), HANDLE)
    assert st.state is State.RUNNING
    assert st.last_progress is not None
    assert st.last_progress["processedRowsPerSecond"] == 1890.0
    assert "1134 rows, 1,890 rows/s" in st.summary()
