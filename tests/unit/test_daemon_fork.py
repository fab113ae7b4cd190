"""kspark's Python daemon (``kspark_server.daemon``) without a JVM: this test speaks
pyspark's daemon protocol as Spark's ``PythonWorkerFactory`` does (the daemon writes its
port on its standard output; each connection forks a worker, which answers with its pid),
and reads what the forked worker has mapped before it ran any task."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kspark_server
from kspark.runtime.serverdaemon import DAEMON_MODULE, DAEMON_SETTING, daemon_conf

_PLUGIN = os.path.dirname(os.path.dirname(kspark_server.__file__))


def _read_int(stream: object) -> int:
    data = b""
    while len(data) < 4:
        chunk = stream.read(4 - len(data))  # type: ignore[attr-defined]
        assert chunk, "the daemon closed its output before it wrote its port"
        data += chunk
    value: int = struct.unpack("!i", data)[0]
    return value


def _env(pythonpath: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=pythonpath, PYTHON_WORKER_FACTORY_SECRET="s3cret")
    return env


def _forked_worker_maps(pythonpath: str) -> Iterator[tuple[str, str]]:
    """Start the daemon, have it fork one worker; yield the worker's memory map and the
    daemon's standard error, then stop both."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", DAEMON_MODULE, "pyspark.worker"],
        env=_env(pythonpath),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    worker = 0
    try:
        assert daemon.stdout is not None and daemon.stdin is not None
        port = _read_int(daemon.stdout)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            worker = _read_int(sock.makefile("rb"))
            with open(f"/proc/{worker}/maps") as f:
                maps = f.read()
        # closing its standard input (as communicate does) is how Spark stops the daemon
        _, err = daemon.communicate(timeout=60)
        yield maps, err.decode(errors="replace")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if worker:
            try:
                os.kill(worker, 9)
            except ProcessLookupError:
                pass


def test_workers_fork_with_pandas_and_pyarrow_loaded() -> None:
    ((maps, err),) = list(_forked_worker_maps(_PLUGIN))
    assert "/pyarrow/libarrow" in maps
    assert "/pandas/_libs/" in maps
    assert "kspark daemon" not in err, err


def test_a_failed_import_leaves_it_to_the_workers(tmp_path: Path) -> None:
    """A module the daemon cannot import is noted on its standard error (the server's
    log); the daemon still starts and forks its workers, which import what they need
    themselves and report a miss there."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    ((maps, err),) = list(_forked_worker_maps(f"{tmp_path}{os.pathsep}{_PLUGIN}"))
    assert "/pyarrow/libarrow" not in maps
    assert "kspark daemon: pyarrow not imported before fork" in err, err


def test_the_server_names_the_daemon_where_the_workers_can_run_it(tmp_path: Path) -> None:
    env = _env(_PLUGIN)
    found = daemon_conf(
        master="local[2]", python=sys.executable, env=env, cwd=str(tmp_path), conf={}
    )
    assert found == {DAEMON_SETTING: DAEMON_MODULE}
    assert daemon_conf(
        master="local-cluster[2,1,1024]", python=sys.executable, env=env, cwd=str(tmp_path), conf={}
    ) == {DAEMON_SETTING: DAEMON_MODULE}


@pytest.mark.parametrize("python", [sys.executable, os.path.join(os.sep, "no", "such", "python")])
def test_the_server_keeps_pysparks_daemon_where_the_workers_cannot_run_it(
    tmp_path: Path, python: str
) -> None:
    # the test server's import blocker: the workers cannot import kspark_server
    blocker = os.path.join(os.path.dirname(os.path.dirname(__file__)), "support", "blocker")
    env = _env(f"{blocker}{os.pathsep}{_PLUGIN}")
    assert daemon_conf(master="local[2]", python=python, env=env, cwd=str(tmp_path), conf={}) == {}
