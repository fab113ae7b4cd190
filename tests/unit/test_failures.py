"""translate_failure: kspark's error types only for failures kspark raised.

The messages are shortened from real Spark 4 failures of kspark apps (a StreamingQuery
exception over Spark Connect): the failure, then the query's logical plan, which holds
the literal of the deserialization check's ``raise_error`` whatever failed.
"""

from __future__ import annotations

import pytest

from kspark.errors import (
    DeserializationError,
    HandlerError,
    ProcessingError,
    StreamsAppError,
)
from kspark.runtime.failures import translate_failure

HEAD = (
    "[STREAM_FAILED] Query [id = 550dea5a-b3dd-4911-9cca-4faf6c03b21d, runId = "
    "c6517748-95de-4307-aeaf-7d36494e5590] terminated with exception: [PYTHON_EXCEPTION] "
    "[session: 00b18a30-d5a1-461a-b4fc-9593e8590e15] [userId: ] Found error inside "
    "foreachBatch Python process: Traceback (most recent call last):\n"
    '  File "/srv/kspark_server/sinks.py", line 105, in write_topic\n'
    "    writer.save(f\"{topic['path'].rstrip('/')}/batch_id={batch_id}\")\n"
    '  File "/srv/pyspark/sql/connect/client/core.py", line 2443, in _handle_rpc_error\n'
    "    raise convert_exception(\n"
)

# what the plan says about a jsonl source with deserialization_exception_handler unset
PLAN = """ SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
Identifier: payments [id = 550dea5a-b3dd-4911-9cca-4faf6c03b21d, runId = c6517748-95de-4307-aeaf-7d36494e5590]
Current Committed Offsets: {}
Current Available Offsets: {FileStreamSource[file:/data/in]: {"logOffset":0}}

Current State: ACTIVE
Thread State: RUNNABLE

Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink, 550dea5a-b3dd-4911-9cca-4faf6c03b21d, [checkpointLocation=/data/chk/query, queryName=payments], Append
+- ~CollectMetrics kspark, [collect_set(CASE WHEN isnotnull(ks_side#52) THEN struct(kind, ...)) AS side#56, count(CASE WHEN isnull(ks_side#52) THEN 1 END) AS records#57L], 9
   +- ~MapInArrow run(key#12, value#13L, timestamp#14L, headers#15, topic#16, partition#17, offset#18L, ks_seq#19L, ks_sub#20L, ks_side#33)#42, [key#43, value#44L], false
      +- ~Project [key#12, value#13L, timestamp#14L, headers#15, topic#16, partition#17, offset#18L, ks_seq#19L, ks_sub#20L, CASE WHEN isnotnull(_corrupt_record#9) THEN cast(raise_error(USER_RAISED_EXCEPTION, map(errorMessage, concat([KSPARK_DESERIALIZATION_FAILED] KSTREAM-SOURCE-0000000000: a record of topic 'in' could not be read as its declared types (offset , cast(offset#18L as string), ): , substring(_corrupt_record#9, 1, 200), . Set StreamsConfig(deserialization_exception_handler=...) to skip such records or send them to a dead-letter queue.)), NullType) as string) ELSE ks_side#21 END AS ks_side#33, _corrupt_record#9]
         +- ~CollectMetrics kspark_in:KSTREAM-SOURCE-0000000000, [count(1) AS records#11L], 4
            +- ~StreamingExecutionRelation FileStreamSource[file:/data/in], [key#2, value#3L, timestamp#4L, headers#5, partition#6, offset#7L, ks_seq#8L, _corrupt_record#9], name=<Unassigned>


JVM stacktrace:
org.apache.spark.sql.streaming.StreamingQueryException
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.runStream(StreamExecution.scala:394)
"""


def test_a_code_only_in_the_plan_is_not_the_failure() -> None:
    # the sink's write failed (nothing kspark raised); the plan mentions the code
    failure = RuntimeError(
        HEAD + "pyspark.errors.exceptions.connect.AnalysisException: [PATH_NOT_FOUND] Path does "
        "not exist: file:/data/out. SQLSTATE: 42K03\n" + PLAN
    )
    err = translate_failure(failure, "payments")
    assert type(err) is StreamsAppError
    assert err.code == "KSPARK_APP_FAILED"
    assert "KSPARK_DESERIALIZATION_FAILED" not in str(err)
    assert str(err).startswith("[KSPARK_APP_FAILED] app payments failed: [STREAM_FAILED] Query")


def test_a_deserialization_failure_raised_by_spark_is_translated() -> None:
    failure = RuntimeError(
        HEAD + "pyspark.errors.exceptions.connect.SparkRuntimeException: [USER_RAISED_EXCEPTION] "
        "[KSPARK_DESERIALIZATION_FAILED] KSTREAM-SOURCE-0000000000: a record of topic 'in' "
        "could not be read as its declared types (offset 3765251985301831680): "
        '{"key": "c", "value": "three", "timestamp": 3}. Set StreamsConfig('
        "deserialization_exception_handler=...) to skip such records or send them to a "
        "dead-letter queue. SQLSTATE: P0001\n" + PLAN
    )
    err = translate_failure(failure, "payments")
    assert type(err) is DeserializationError
    assert str(err).startswith(
        "[KSPARK_DESERIALIZATION_FAILED] KSTREAM-SOURCE-0000000000: a record of topic 'in' "
        "could not be read as its declared types (offset 3765251985301831680)"
    )
    assert str(err).endswith("send them to a dead-letter queue.")  # no SQLSTATE


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "kspark_server.handling.ProcessingFailed: processor KSTREAM-MAPVALUES-0000000001 "
            "failed on record (topic=in partition=0 offset=3 timestamp=3 task=0_0): "
            "ZeroDivisionError: integer division or modulo by zero.",
            ProcessingError,
        ),
        (
            "kspark_server.handling.HandlerFailed: the processing exception handler Boom "
            "raised ValueError: no while handling ZeroDivisionError from processor "
            "KSTREAM-MAPVALUES-0000000001 (topic=in partition=0 offset=3 timestamp=3 task=0_0)",
            HandlerError,
        ),
    ],
)
def test_a_worker_failure_is_translated_with_its_message(line: str, kind: type) -> None:
    worker = (
        "pyspark.errors.exceptions.connect.PythonException: \n"
        "  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most "
        "recent call last):\n"
        '  File "/srv/kspark_server/handling.py", line 147, in on_error\n'
        "    raise ProcessingFailed(\n"
        f"{line}\n SQLSTATE: 38000\n"
    )
    err = translate_failure(RuntimeError(HEAD + worker + PLAN), "payments")
    assert type(err) is kind
    assert str(err) == f"[{kind.code}] {line.split(': ', 1)[1]}"


def test_a_plan_naming_a_kspark_class_is_not_the_failure() -> None:
    # a processor named after the exception, mid-line in the plan: not raised
    plan = PLAN.replace("~MapInArrow run(", "~MapInArrow ProcessingFailed: run(")
    err = translate_failure(RuntimeError(HEAD + "OSError: disk full\n" + plan), "payments")
    assert type(err) is StreamsAppError
