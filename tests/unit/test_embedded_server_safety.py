"""The embedded server's start and lifetime without a JVM (issue 17): a fake
``spark-submit`` stands in for Spark."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kspark.errors import ServerError
from kspark.runtime import server


def fake_spark_home(root: Path, script: str) -> Path:
    """A SPARK_HOME whose ``bin/spark-submit`` runs ``script`` (sh) instead of Spark."""
    (root / "jars").mkdir(parents=True)
    (root / "bin").mkdir()
    submit = root / "bin" / "spark-submit"
    submit.write_text("#!/bin/sh\n" + script + "\n")
    submit.chmod(0o755)
    return root


@pytest.fixture
def listener() -> Iterator[int]:
    """A port where a program that is not Spark Connect accepts connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie whose parent died counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_probe_refuses_a_listener_that_is_not_spark_connect(listener: int) -> None:
    started = time.monotonic()
    assert not server._answers_as_our_server(listener, "token", timeout=1.0)
    assert time.monotonic() - started < 10


def test_a_foreign_listener_on_the_port_is_not_taken_for_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: int
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_home(tmp_path / "spark", "exec sleep 60")))
    s = server.EmbeddedServer(home=str(tmp_path / "home"))
    s.port = listener  # as if another program took the port after _free_port()
    with pytest.raises(ServerError, match="did not answer") as info:
        s.start(timeout=2.0, same_port=True)
    assert s.process is None  # the fake server was stopped
    assert os.path.exists(info.value.params["log"])


def test_a_failed_start_keeps_its_log_and_quotes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = "echo 'Exception in thread main: bind failed'; exit 3"
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_home(tmp_path / "spark", script)))
    with pytest.raises(ServerError, match="bind failed") as info:
        server.EmbeddedServer(home=str(tmp_path / "home")).start(timeout=30.0)
    assert "code 3" in str(info.value)
    log = info.value.params["log"]
    assert "bind failed" in Path(log).read_text() and log in str(info.value)


def test_tables_live_in_the_home_not_in_the_server_work_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fake spark-submit prints its arguments and fails, so the command line shows
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_home(tmp_path / "spark", 'echo "$@"; exit 1')))
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path / "kspark-home"))
    with pytest.raises(ServerError) as info:
        server.EmbeddedServer().start(timeout=30.0)
    args = Path(info.value.params["log"]).read_text()
    home = tmp_path / "kspark-home"
    assert f"spark.sql.warehouse.dir={home / 'warehouse'}" in args
    assert "spark.sql.catalogImplementation=hive" in args
    assert str(home / "metastore" / "metastore_db") in args


PARENT = """
import subprocess, sys, time
sys.path[:0] = {path!r}
from kspark.runtime import server
proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
server._start_watchdog(proc.pid)
print(proc.pid, flush=True)
time.sleep(60)
"""


def test_the_server_does_not_outlive_a_client_killed_with_sigkill() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT.format(path=sys.path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)
        assert not gone(child)  # the watchdog waits while its parent lives
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gone(child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
