"""Remote submission without a server: URLs, handles, shipping of local packages, and the
errors for unknown apps and unreachable servers."""

from __future__ import annotations

import importlib
import os
import socket
import stat
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kspark.cli import main
from kspark.errors import ServerError, ServerUnreachableError, UnknownAppError
from kspark.runtime import shipping
from kspark.runtime.app import State
from kspark.runtime.submit import (
    AppStatus,
    OutputInfo,
    SubmittedApp,
    load_handle,
    status,
    stop,
    with_params,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def handle(**changes: object) -> SubmittedApp:
    values: dict[str, object] = {
        "app_id": "payments",
        "remote": "sc://localhost:15002",
        "session_id": str(uuid.uuid4()),
        "user_id": "alice",
        "query_id": "q",
        "run_id": "r",
        "checkpoint": "/chk/query",
        "outputs": (OutputInfo(name="out", format="jsonl", location="/data/out"),),
    }
    values.update(changes)
    return SubmittedApp(**values)  # type: ignore[arg-type]


def test_url_parameters() -> None:
    url = "sc://spark:15002/;token=abc;user_id=bob"
    assert (
        with_params(url, session_id="s1") == "sc://spark:15002/;token=abc;user_id=bob;session_id=s1"
    )
    assert with_params(url, token=None, user_id=None) == "sc://spark:15002"
    assert with_params("sc://spark", session_id="s") == "sc://spark/;session_id=s"
    with pytest.raises(ServerError):
        with_params("http://spark:15002")


def test_handle_round_trip_is_private_and_has_no_token(home: Path) -> None:
    saved = handle().save()
    assert saved.path == str(home / "apps" / "payments.json")
    assert stat.S_IMODE(os.stat(saved.path).st_mode) == 0o600
    loaded = load_handle("payments")
    assert loaded == saved and loaded.outputs[0].location == "/data/out"
    assert loaded.url("sc://localhost:15002/;token=t") == (
        f"sc://localhost:15002/;token=t;session_id={saved.session_id};user_id=alice"
    )
    assert "-> /data/out/\n" in loaded.summary() + "\n"  # the folder, in either layout


def test_status_round_trip() -> None:
    st = AppStatus(app_id="a", state=State.ERROR, message="failed", error="boom", input_records=3)
    again = AppStatus.from_dict(st.to_dict())
    assert again == st and not again.running
    assert "boom" in again.summary()


def test_unknown_app(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnknownAppError, match="no app 'nope' was submitted"):
        status("nope")
    with pytest.raises(UnknownAppError):
        stop("nope", remote="sc://localhost:15002")
    assert main(["status", "--app-id", "nope"]) == 1
    assert "KSPARK_UNKNOWN_APP" in capsys.readouterr().err


def test_server_unreachable(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sc://127.0.0.1:{closed_port()}"
    handle(remote=url).save()
    with pytest.raises(ServerUnreachableError) as info:
        status("payments")
    assert info.value.code == "KSPARK_SERVER_UNREACHABLE" and isinstance(info.value, ServerError)
    assert main(["stop", "--app-id", "x", "--remote", url, "--session-id", str(uuid.uuid4())]) == 1
    assert "KSPARK_SERVER_UNREACHABLE" in capsys.readouterr().err


@pytest.fixture
def local_package(tmp_path: Path) -> Iterator[str]:
    """A package outside any installed location: ``<pkg>.topo`` uses ``<pkg>.helpers``."""
    pkg = f"localpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / pkg / "topo.py").write_text(
        "from kspark import StreamsBuilder, Topic\n"
        f"from {pkg}.helpers import twice\n"
        "def build():\n"
        "    b = StreamsBuilder()\n"
        "    b.stream(Topic.jsonl('in', '/in'), key_type=str, value_type=int)"
        ".map_values(lambda v: twice(v), value_type=int).to(Topic.jsonl('out', '/out'))\n"
        "    return b.build()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield pkg
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
            del sys.modules[name]


def test_a_local_module_ships_with_its_package(local_package: str) -> None:
    topo = importlib.import_module(f"{local_package}.topo").build()
    shipped = shipping.modules_to_ship(topo)
    # the whole package, so that ``helpers`` (never named in the plan) reaches the server
    assert local_package in shipped and f"{local_package}.topo" not in shipped
    # kspark_server travels in bundles (kspark.compiler.bundle), never by value in every function
    assert "kspark_server" not in shipped and not any(m.startswith("pyspark") for m in shipped)
    named = shipping.modules_to_ship(topo, names=[f"{local_package}.helpers"])
    assert local_package in named and f"{local_package}.helpers" not in named


def test_status_counts_a_forked_source_once() -> None:
    from kspark.runtime.app_status import status_of as _status_of

    class Query:
        """A running query whose one source feeds two sinks: Spark's progress counts the
        source's 10 records twice; kspark's observation of the source says 10."""

        isActive = True
        status = {"message": "Processing new data"}
        id = "q-1"
        runId = "r-1"
        recentProgress = [
            {
                "runId": "r-1",
                "batchId": 0,
                "timestamp": "2025-01-01T00:00:00.000Z",
                "sources": [{"description": "FileStreamSource[/in]", "numInputRows": 20}],
                "observedMetrics": {
                    "kspark": {"records": 20, "side": []},
                    "kspark_in:KSTREAM-SOURCE-0000000000": {"records": 10},
                },
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
    st = _status_of(Query(), handle)
    assert (st.state, st.batches, st.input_records, st.output_records) == (State.RUNNING, 1, 10, 20)
    assert st.last_progress is not None and st.last_progress["numInputRows"] == 10
    assert "10 rows" in st.summary()


def test_a_closed_session_is_told_by_its_error_condition_not_its_text() -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from kspark.runtime.submit import _session_closed

    closed = SparkConnectGrpcException(
        message="[INVALID_HANDLE.SESSION_CLOSED] Session was closed.",
        errorClass="INVALID_HANDLE.SESSION_CLOSED",
    )
    assert _session_closed(closed)
    # a message that only mentions the condition (a query plan, a user's text) is not it
    assert not _session_closed(RuntimeError("INVALID_HANDLE.SESSION_CLOSED"))
