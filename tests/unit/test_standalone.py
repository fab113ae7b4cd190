"""``kspark server start | stop | status`` (issue 21) against a stand-in for Spark's sbin
scripts: a SPARK_HOME whose start-connect-server.sh runs a small Python process that
listens on the port (no JVM), as spark-daemon.sh would, with its pid file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kspark import cli
from kspark.errors import ServerError
from kspark.runtime import standalone

START = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    # records what it was given, then starts a listener on the port, like spark-daemon.sh
    port=""
    for arg in "$@"; do
      case "$arg" in spark.connect.grpc.binding.port=*) port="${arg#*=}";; esac
    done
    printf '%s\\n' "$@" > "$SPARK_PID_DIR/args"
    env > "$SPARK_PID_DIR/env"
    mkdir -p "$SPARK_LOG_DIR"
    nohup "$FAKE_PYTHON" -c "
    import socket, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', $port)); s.listen()
    time.sleep(600)
    " >> "$SPARK_LOG_DIR/spark-connect.out" 2>&1 < /dev/null &
    echo $! > "$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-org.apache.spark.sql.connect.service.SparkConnectServer-1.pid"
    """
)
STOP = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    pid_file="$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-org.apache.spark.sql.connect.service.SparkConnectServer-1.pid"
    kill "$(cat "$pid_file")" && rm -f "$pid_file"
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "spark"
    for sub in ("bin", "sbin", "jars"):
        (home / sub).mkdir(parents=True)
    for path, text in (
        (home / "bin" / "spark-submit", "#!/bin/sh\nexit 1\n"),
        (home / "sbin" / "start-connect-server.sh", START),
        (home / "sbin" / "stop-connect-server.sh", STOP),
    ):
        path.write_text(text)
        path.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path / "ksh"))
    monkeypatch.setenv("FAKE_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", "/client/only")
    yield tmp_path / "ksh" / "server"
    state = standalone.ServerState.load(str(tmp_path / "ksh" / "server"))
    if state is not None:  # a failed test: end the stand-in it started, by its pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)


def test_start_status_stop(fake_spark: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    argv = ["server", "start", "--port", str(port), "--master", "local[3]",
            "--worker-python", sys.executable, "--conf", "spark.executor.memory=1g",
            "--timeout", "20"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    token = (fake_spark / "token").read_text().strip()
    assert len(token) == 32
    assert stat.S_IMODE((fake_spark / "token").stat().st_mode) == 0o600
    assert f"sc://localhost:{port}/;token={token}" in out
    assert "kspark server stop" in out

    args = (fake_spark / "args").read_text().splitlines()
    assert args[:2] == ["--master", "local[3]"]
    assert "spark.executor.memory=1g" in args
    assert f"spark.connect.grpc.binding.port={port}" in args
    # the settings the embedded server has, from the same place
    assert (
        "spark.sql.streaming.stateStore.providerClass="
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" in args
    )
    assert not any(token in a for a in args)  # the token is not on the command line
    env = dict(
        line.split("=", 1) for line in (fake_spark / "env").read_text().splitlines() if "=" in line
    )
    assert env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] == token
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"  # a local master on loopback
    assert "PYTHONPATH" not in env  # the workers see only what their Python has

    assert cli.main(["server", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"running: sc://localhost:{port}/;token=<in ")
    assert token not in out
    assert cli.main(["server", "status", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["running"] is True and token not in json.dumps(described)
    assert cli.main(["server", "status", "--url"]) == 0
    assert capsys.readouterr().out.strip() == f"sc://localhost:{port}/;token={token}"

    with pytest.raises(ServerError, match="runs already"):
        standalone.start(port=_free_port(), directory=str(fake_spark))

    pid = json.loads((fake_spark / "server.json").read_text())["pid"]
    assert cli.main(["server", "stop"]) == 0
    assert f"pid {pid}" in capsys.readouterr().out
    assert not (fake_spark / "server.json").exists() and not (fake_spark / "token").exists()
    assert not standalone._alive(pid)  # gone, or a zombie where pid 1 does not reap
    assert cli.main(["server", "status"]) == 1
    assert "no Spark Connect server" in capsys.readouterr().out
    assert cli.main(["server", "stop"]) == 0


def test_a_dead_server_is_forgotten(fake_spark: Path) -> None:
    fake_spark.mkdir(parents=True)
    state = standalone.ServerState(
        pid=2**22 + 17, host="localhost", port=1, master="local[2]", worker_python="/py",
        spark_home="/s", log_dir="/l", started_at=0.0, directory=str(fake_spark),
    )  # fmt: skip
    state.save()
    assert standalone.status(str(fake_spark)) is None
    assert not (fake_spark / "server.json").exists()


def test_start_refuses_a_missing_worker_python_and_a_used_port(fake_spark: Path) -> None:
    with pytest.raises(ServerError, match="not an executable"):
        standalone.start(worker_python="/no/such/python", directory=str(fake_spark))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ServerError, match="is in use"):
            standalone.start(port=s.getsockname()[1], directory=str(fake_spark))
    assert not (fake_spark / "server.json").exists()
