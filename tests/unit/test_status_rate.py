"""``kspark status`` shows a batch's rate (issue 21: ``1134 rows, 0 rows/s``)."""

from __future__ import annotations

from kspark.runtime.app import State
from kspark.runtime.app_status import status_of
from kspark.runtime.handles import SubmittedApp


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

    handle = SubmittedApp(
        app_id="payments",
        remote="sc://localhost:15002",
        session_id="s",
        user_id=None,
        query_id="q-1",
        run_id="r-1",
        checkpoint="/chk",
    )
    st = status_of(Query(), handle)
    assert st.state is State.RUNNING
    assert st.last_progress is not None
    assert st.last_progress["processedRowsPerSecond"] == 1890.0
    assert "1134 rows, 1,890 rows/s" in st.summary()
