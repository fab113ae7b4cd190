"""Failures from the server name their cause (issue 21): the root cause of a worker's or
the JVM's failure, and the full trace in a log file the message names."""

from __future__ import annotations

from pathlib import Path

import pytest

from kspark.errors import StreamsAppError
from kspark.runtime import failures
from kspark.runtime.failures import translate_failure

# the message the CLI cut off in issue 21: kspark's Kafka source on a worker without
# confluent-kafka
KAFKA = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_EXCEPTION] "
    "prepareForTriggerAvailableNow: Traceback (most recent call last):\n"
    '  File "/tmp/spark-1/pyspark.zip/pyspark/sql/worker/plan_data_source_read.py", line 9, '
    "in main\n"
    '  File "/srv/kspark_server/kafka.py", line 93, in _client\n'
    "    from confluent_kafka import Consumer, KafkaError, Message, Producer\n"
    "ModuleNotFoundError: No module named 'confluent_kafka' SQLSTATE: 38000\n"
    "\n=== Streaming Query ===\nIdentifier: payments\n"
    "Logical Plan:\n~MapInArrow ValueError: not this\n"
)

# a user function raising outside kspark's handlers: the last frame that is not pyspark's
USER = (
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most "
    "recent call last):\n"
    '  File "/srv/app/topo.py", line 12, in convert\n'
    "    raise ValueError(f'no rate for {p.currency}')\n"
    '  File "/opt/spark/python/pyspark/worker.py", line 40, in process\n'
    "ValueError: no rate for XYZ\n"
    "JVM stacktrace:\norg.apache.spark.api.python.PythonException\n\tat x.y(Z.scala:1)\n"
)


class _SparkLike(Exception):
    """A pyspark exception: ``getCondition()`` and the message without it."""

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(message)
        self._condition = condition

    def getCondition(self) -> str:
        return self._condition


def test_root_cause_is_the_last_exception_of_the_worker_traceback() -> None:
    assert failures.root_cause(RuntimeError(KAFKA)) == (
        "ModuleNotFoundError: No module named 'confluent_kafka' (in _client, kafka.py)"
    )
    assert failures.root_cause(RuntimeError(USER)) == (
        "ValueError: no rate for XYZ (in convert, topo.py)"
    )


def test_root_cause_of_a_jvm_failure_is_its_condition_and_message() -> None:
    exc = _SparkLike("PATH_NOT_FOUND", "Path does not exist: file:/in. SQLSTATE: 42K03")
    assert failures.root_cause(exc) == "[PATH_NOT_FOUND] Path does not exist: file:/in."
    wrapped = RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [CANNOT_READ] bad file"
    )
    assert failures.root_cause(wrapped) == "[CANNOT_READ] bad file"


def test_summary_names_the_cause_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path))
    text = failures.summarize(RuntimeError(KAFKA), "payments")
    first, cause, trace = text.splitlines()
    assert first.endswith("prepareForTriggerAvailableNow:")  # no dangling "Traceback"
    assert (
        cause
        == "cause: ModuleNotFoundError: No module named 'confluent_kafka' (in _client, kafka.py)"
    )
    path = Path(trace.removeprefix("full trace: "))
    assert path.parent == tmp_path / "logs" and path.name.startswith("payments-")
    assert "=== Streaming Query ===" in path.read_text()
    # the same failure reported again (kspark status of a failed app) reuses its log
    assert failures.summarize(RuntimeError(KAFKA), "payments").endswith(str(path))
    assert len(list(path.parent.iterdir())) == 1


def test_translate_failure_adds_the_cause_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path))
    err = translate_failure(RuntimeError(KAFKA), "payments", log=True)
    assert type(err) is StreamsAppError
    assert "cause: ModuleNotFoundError: No module named 'confluent_kafka'" in str(err)
    assert f"full trace: {tmp_path / 'logs'}" in str(err)
    # without log, nothing is written
    translate_failure(RuntimeError(KAFKA), "other")
    assert [p.name.split("-")[0] for p in (tmp_path / "logs").iterdir()] == ["payments"]


def test_cli_prints_the_cause_of_an_untranslated_server_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kspark import cli

    class PythonException(Exception):
        pass

    PythonException.__module__ = "pyspark.errors.exceptions.connect"

    def failing(**_kwargs: object) -> None:
        raise PythonException(USER)

    monkeypatch.setenv("KSPARK_HOME", str(tmp_path))
    monkeypatch.setattr("kspark_demo.run_demo", failing)
    assert cli.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert "cause: ValueError: no rate for XYZ (in convert, topo.py)" in err
    assert "full trace: " in err
