"""The worker check (issue 21): what a plan needs, and how a probe's report is read.

The probe job itself needs a server (tests/integration/test_deployment.py); here it is
replaced by its report.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import ServerError
from kspark.runtime import workers
from kspark.runtime.workers import Need, WorkerReport
from kspark_server.probe import probe


def _output(*, stateful: bool = False, kafka: bool = False) -> st.Output:
    b = StreamsBuilder()
    source = (
        Topic.kafka("in", bootstrap_servers="localhost:9092")
        if kafka
        else Topic.jsonl("in", "/tmp/in")
    )
    s = b.stream(source, key_type=str, value_type=str)
    if stateful:
        s = s.deduplicate_by_key(timedelta(minutes=1))
    s.map_values(str.upper, value_type=str).to(Topic.jsonl("out", "/tmp/out"))
    return compile_topology(b.build(), StreamsConfig(application_id="a"))


def _modules(output: st.Output, python_kafka: bool = True) -> list[str]:
    return [n.module for n in workers.needs(output, python_kafka=python_kafka)]


def test_needs_follow_the_plan() -> None:
    base = _modules(_output())
    assert base == ["pyarrow", "pandas", "numpy", "grpc", "grpc_status", "google.protobuf",
                    "google.rpc", "zstandard"]  # fmt: skip
    assert _modules(_output(stateful=True)) == [*base, "msgspec", "lmdb"]
    assert _modules(_output(kafka=True)) == [*base, "confluent_kafka"]
    # Kafka through Spark's JVM connector needs no confluent-kafka on the workers
    assert _modules(_output(kafka=True), python_kafka=False) == base


def test_requirements_parse_extras_and_markers() -> None:
    lines = [
        "pandas<3,>=2.2",
        'confluent-kafka>=2.3; extra == "kafka"',
        'pytest>=8; extra == "dev"',
        "grpcio_status >= 1.76",
        'pyspark[connect]<5,>=4.3; extra == "local"',
    ]
    assert workers.parse_requirements(lines, ["kafka"]) == {
        "pandas": "<3,>=2.2",
        "confluent-kafka": ">=2.3",
        "grpcio-status": ">=1.76",
    }


@pytest.mark.parametrize(
    ("version", "spec", "ok"),
    [
        ("2.2.0", ">=2.2,<3", True),
        ("2.1.9", ">=2.2,<3", False),
        ("3.0", ">=2.2,<3", False),
        ("1.76.0", ">=1.76", True),
        ("0.25.0", ">=0.25.0", True),
        ("1.2.5", "==1.2.*", True),
        ("1.3.0", "==1.2.*", False),
        ("18.1.0", "", True),
        ("2.0.0rc1", ">=2", True),
    ],
)
def test_satisfies(version: str, spec: str, ok: bool) -> None:
    assert workers.satisfies(version, spec) is ok


def _report(**modules: tuple[str | None, str | None]) -> WorkerReport:
    return WorkerReport("3.11.9", "/srv/worker-venv/bin/python", modules)


def test_problems_name_each_missing_or_old_package_and_the_fix() -> None:
    report = _report(
        grpc=(None, "ModuleNotFoundError: No module named 'grpc'"),
        pandas=("2.1.0", None),
        pyarrow=("18.1.0", None),
    )
    wanted = [Need("grpc", "grpcio"), Need("pandas", "pandas"), Need("pyarrow", "pyarrow")]
    required = {"grpcio": ">=1.76", "pandas": "<3,>=2.2", "pyarrow": ">=18"}
    found = workers.problems(report, wanted, required)
    assert [need.module for need, _ in found] == ["grpc", "pandas"]
    message = workers.failure_message(report, found, required)
    assert "No module named 'grpc'" in message
    assert "pandas 2.1.0 is installed; kspark needs pandas<3,>=2.2" in message
    assert "/srv/worker-venv/bin/python (Python 3.11.9)" in message
    assert "/srv/worker-venv/bin/python -m pip install 'grpcio>=1.76' 'pandas<3,>=2.2'" in message
    assert "no query was started" in message


def test_probe_reports_this_interpreter() -> None:
    found = json.loads(probe(json.dumps([["pandas", "pandas"], ["no_such_mod_kspark", "x"]])))
    assert found["modules"]["pandas"]["version"]
    assert found["modules"]["no_such_mod_kspark"]["error"].startswith("ModuleNotFoundError")
    report = WorkerReport.from_json(json.dumps(found))
    assert report.executable and report.python.count(".") == 2


class _Session:
    """Stands in for a SparkSession: hashable, weak-referenceable, never used."""


def test_check_raises_one_server_error_and_caches_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []
    missing: set[str] = {"lmdb"}

    def fake_probe(_spark: Any, wanted: Any) -> WorkerReport:
        wanted = list(wanted)
        calls.append([n.module for n in wanted])
        return _report(
            **{
                n.module: (None, f"ModuleNotFoundError: No module named '{n.module}'")
                if n.module in missing
                else ("99.0", None)
                for n in wanted
            }
        )

    monkeypatch.setattr(workers, "run_probe", fake_probe)
    monkeypatch.setattr(workers, "requirements", dict)  # any version will do here
    session = _Session()
    config = StreamsConfig(application_id="a")
    with pytest.raises(ServerError, match="No module named 'lmdb'") as info:
        workers.check(session, _output(stateful=True), config)  # type: ignore[arg-type]
    assert info.value.params["missing"] == ["lmdb"]
    assert info.value.params["python"] == "/srv/worker-venv/bin/python"
    missing.clear()
    workers.check(session, _output(), config)  # type: ignore[arg-type]
    workers.check(session, _output(), config)  # type: ignore[arg-type]
    assert len(calls) == 2  # the second stateless check is cached
    workers.check(session, _output(stateful=True), config)  # type: ignore[arg-type]
    assert calls[-1] == ["msgspec", "lmdb"]  # only what the new plan adds
    workers.check(_Session(), _output(), config)  # type: ignore[arg-type]
    assert len(calls) == 4  # a new session is checked again


def test_a_probe_that_cannot_run_is_a_server_error_with_its_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(_spark: Any, _wanted: Any) -> WorkerReport:
        raise RuntimeError(
            "[PYTHON_EXCEPTION] Traceback (most recent call last):\n"
            '  File "/srv/pyspark/worker.py", line 1, in main\n'
            "RuntimeError: Python in worker has different version (3, 10) than that in "
            "driver 3.11, PySpark cannot run with different minor versions.\n"
        )

    monkeypatch.setattr(workers, "run_probe", broken)
    with pytest.raises(ServerError, match=r"different version \(3, 10\)"):
        workers.check(_Session(), _output(), StreamsConfig(application_id="a"))  # type: ignore[arg-type]


def test_the_probe_names_this_clients_kspark_server_by_its_sources() -> None:
    found = json.loads(probe("[]"))
    assert found["kspark_server"] == workers.client_fingerprint()


@pytest.mark.parametrize("theirs", [None, "0" * 64, "same"])
def test_server_code_travels_by_reference_only_to_workers_with_the_same_sources(
    monkeypatch: pytest.MonkeyPatch, theirs: str | None
) -> None:
    from pyspark import cloudpickle

    from kspark.compiler import bundle as _bundle
    from kspark.runtime import shipping

    digest = workers.client_fingerprint() if theirs == "same" else theirs

    def fake_probe(_spark: Any, wanted: Any) -> WorkerReport:
        return WorkerReport("3.11.9", "/w/python", {n.module: ("9", None) for n in wanted}, digest)

    monkeypatch.setattr(workers, "run_probe", fake_probe)
    monkeypatch.setattr(workers, "requirements", dict)
    session = _Session()
    workers.check(session, _output(stateful=True), StreamsConfig(application_id="a"))  # type: ignore[arg-type]
    same = workers.same_server_code(session)  # type: ignore[arg-type]
    assert same == (theirs == "same")
    try:
        shipping.server_code(by_reference=False)
        shipping.server_code(by_reference=same)
        # never by value in every function: in bundles where the workers lack it
        assert "kspark_server" not in cloudpickle.list_registry_pickle_by_value()  # type: ignore[no-untyped-call]
        assert _bundle.by_value() != same
    finally:
        shipping.server_code(by_reference=False)  # as StreamsApp starts: by value
