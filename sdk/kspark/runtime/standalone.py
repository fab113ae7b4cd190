"""``kspark server start | stop | status``: a standalone Spark Connect server.

The server is Spark's own: ``sbin/start-connect-server.sh`` and ``stop-connect-server.sh``
of the installed pyspark (pip's full pyspark has them and works as ``SPARK_HOME``), with
the settings kspark needs (:func:`kspark.runtime.server.default_server_conf`, shared with
the embedded server), a worker Python of your choice and a fresh authentication token.
Unlike the embedded server it outlives the process that started it, and with
``--master local-cluster[N,cores,MiB]`` or ``spark://...`` its executors are JVMs of their own.

Its state lives in ``$KSPARK_HOME/server`` (``~/.kspark/server``): ``server.json`` (pid,
URL without the token, master, worker Python, log directory), ``token`` (mode 0600), Spark's
pid file and ``logs/``. The token is printed only inside the URL that ``start`` and
``status --url`` print.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import attrs

from kspark._paths import kspark_home, local_state_dir
from kspark.errors import ServerError
from kspark.runtime.server import (
    accepts_connections,
    default_server_conf,
    server_arguments,
    server_environment,
    spark_home,
)
from kspark.runtime.serverdaemon import daemon_conf

__all__ = ["ServerState", "start", "state_dir", "status", "stop"]

_STATE = "server.json"
_TOKEN = "token"
_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def state_dir() -> str:
    """``$KSPARK_HOME/server``: where a started server's state is kept."""
    return kspark_home("server")


@attrs.frozen(kw_only=True)
class ServerState:
    """A server that ``kspark server start`` started, as ``server.json`` records it."""

    pid: int
    host: str
    port: int
    master: str
    worker_python: str
    spark_home: str
    log_dir: str
    started_at: float
    directory: str

    @property
    def token_file(self) -> str:
        return os.path.join(self.directory, _TOKEN)

    def url(self, *, with_token: bool) -> str:
        """The ``sc://`` URL; with ``with_token`` it holds the token in full, else masked.

        Examples
        --------
        >>> s = ServerState(pid=1, host="localhost", port=15002, master="local[2]",
        ...                 worker_python="/py", spark_home="/s", log_dir="/l", started_at=0,
        ...                 directory="/nonexistent")
        >>> s.url(with_token=False)
        'sc://localhost:15002/;token=<in /nonexistent/token>'
        """
        if not with_token:
            return f"sc://{self.host}:{self.port}/;token=<in {self.token_file}>"
        with open(self.token_file, encoding="utf-8") as f:
            return f"sc://{self.host}:{self.port}/;token={f.read().strip()}"

    def save(self) -> None:
        data = attrs.asdict(self)
        del data["directory"]
        path = os.path.join(self.directory, _STATE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory: str | None = None) -> ServerState | None:
        directory = directory or state_dir()
        try:
            with open(os.path.join(directory, _STATE), encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ServerError(
                f"cannot read {os.path.join(directory, _STATE)}: {exc}; remove it if no server runs"
            ) from exc
        return cls(directory=directory, **data)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: the pid was reused
    # an exited server that nobody reaped yet (where pid 1 does not reap) is not running
    with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _write_token(directory: str) -> str:
    token = secrets.token_hex(16)
    path = os.path.join(directory, _TOKEN)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    # created 0600, never readable by others, not even for a moment
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def _ident() -> str:
    """What Spark's scripts name their pid file and logs after."""
    return os.environ.get("SPARK_IDENT_STRING") or os.environ.get("USER") or "kspark"


def _pid_file(directory: str) -> str:
    return os.path.join(directory, f"spark-{_ident()}-{_CLASS}-1.pid")


def _script_env(directory: str, home: str, python: str, token: str) -> dict[str, str]:
    return {
        **server_environment(
            home=home,
            python=python,
            token=token,
            workdir=directory,
            local_state=local_state_dir(),
        ),
        # spark-daemon.sh keeps its pid file and log here, not in /tmp and SPARK_HOME
        "SPARK_PID_DIR": directory,
        "SPARK_LOG_DIR": os.path.join(directory, "logs"),
        "SPARK_IDENT_STRING": _ident(),
    }


def status(directory: str | None = None) -> ServerState | None:
    """The started server if it still runs; None (and its stale state removed) if not."""
    state = ServerState.load(directory)
    if state is None:
        return None
    if not _alive(state.pid):
        _forget(state.directory)
        return None
    return state


def _forget(directory: str) -> None:
    for name in (_STATE, _TOKEN):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, name))


def start(
    *,
    master: str = "local[2]",
    port: int = 15002,
    worker_python: str | None = None,
    host: str = "127.0.0.1",
    conf: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    directory: str | None = None,
) -> ServerState:
    """Start a Spark Connect server with Spark's ``sbin/start-connect-server.sh``.

    Parameters
    ----------
    master
        ``local[N]``, ``local-cluster[workers,cores,MiB]`` or ``spark://host:port``.
    port
        The Spark Connect port.
    worker_python
        The Python of the server's workers (``PYSPARK_PYTHON``); default: this one.
    host
        The address the server listens on: loopback by default, ``0.0.0.0`` for all.
    conf
        More Spark settings, over kspark's defaults.

    Raises
    ------
    ServerError
        If a server started here still runs, the worker Python does not exist, or the
        server does not listen within ``timeout`` (with the end of its log).
    """
    directory = directory or state_dir()
    running = status(directory)
    if running is not None:
        raise ServerError(
            f"a Spark Connect server started by kspark runs already (pid {running.pid}, "
            f"{running.url(with_token=False)}); stop it first: kspark server stop",
            pid=running.pid,
        )
    python = worker_python or sys.executable
    if shutil.which(python) is None:
        raise ServerError(f"--worker-python {python!r} is not an executable", python=python)
    probe_host = "127.0.0.1" if host == "0.0.0.0" else host
    if accepts_connections(probe_host, port, 0.5):
        raise ServerError(f"port {port} is in use; choose another with --port", port=port)
    home = spark_home()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    token = _write_token(directory)
    settings = {
        **default_server_conf(),
        "spark.connect.grpc.binding.address": host,
        **(conf or {}),
    }
    env = _script_env(directory, home, python, token)
    settings = {
        **daemon_conf(master=master, python=python, env=env, cwd=directory, conf=settings),
        **settings,
    }
    cmd = [
        "bash",  # a wheel's scripts may have lost their exec bit
        os.path.join(home, "sbin", "start-connect-server.sh"),
        *server_arguments(
            master=master,
            port=port,
            workdir=directory,
            conf=settings,
            home=directory,
            python=python,
            executor_env={"KSPARK_LOCAL_STATE_DIR": local_state_dir()},
        ),
    ]
    if master.startswith("local") and host == "127.0.0.1":
        # as the embedded server: a driver on loopback needs no resolvable host name
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(cmd, env=env, cwd=directory, capture_output=True, text=True, check=False)
    log_dir = env["SPARK_LOG_DIR"]
    pid = _read_pid(directory)
    if done.returncode != 0 or pid is None:
        _forget(directory)
        raise ServerError(
            f"{cmd[1]} failed (exit code {done.returncode}): "
            f"{(done.stdout + done.stderr).strip()[-2000:]}",
            log=log_dir,
        )
    state = ServerState(
        pid=pid,
        host="localhost" if host in ("127.0.0.1", "0.0.0.0") else host,
        port=port,
        master=master,
        worker_python=python,
        spark_home=home,
        log_dir=log_dir,
        started_at=time.time(),
        directory=directory,
    )
    state.save()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            _forget(directory)
            raise ServerError(
                f"the Spark Connect server exited while starting; end of its log:\n"
                f"{_tail(log_dir)}",
                log=log_dir,
            )
        if accepts_connections(probe_host, port, 0.5):
            return state
        time.sleep(0.5)
    stop(directory)
    raise ServerError(
        f"the Spark Connect server did not listen on port {port} in {timeout:.0f}s; end "
        f"of its log:\n{_tail(log_dir)}",
        log=log_dir,
    )


def _read_pid(directory: str) -> int | None:
    try:
        with open(_pid_file(directory), encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _tail(log_dir: str, lines: int = 20) -> str:
    try:
        names = sorted(
            (os.path.join(log_dir, n) for n in os.listdir(log_dir) if n.endswith(".out")),
            key=os.path.getmtime,
        )
        with open(names[-1], errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except (OSError, IndexError):
        return "(no log)"


def stop(directory: str | None = None, timeout: float = 30.0) -> ServerState | None:
    """Stop the server with Spark's ``sbin/stop-connect-server.sh``; None if none ran.

    The script sends SIGTERM to the server's pid; if the server still runs after
    ``timeout`` seconds it gets SIGKILL.
    """
    directory = directory or state_dir()
    state = status(directory)
    if state is None:
        return None
    script = os.path.join(state.spark_home, "sbin", "stop-connect-server.sh")
    env = _script_env(directory, state.spark_home, state.worker_python, "")
    subprocess.run(["bash", script], env=env, cwd=directory, capture_output=True, check=False)
    deadline = time.monotonic() + timeout
    while _alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(state.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
    _forget(directory)
    return state


def describe(state: ServerState | None, *, with_token: bool = False) -> dict[str, Any]:
    """What ``kspark server status`` prints (as JSON with ``--json``)."""
    if state is None:
        return {"running": False}
    return {
        "running": True,
        "url": state.url(with_token=with_token),
        "pid": state.pid,
        "master": state.master,
        "worker_python": state.worker_python,
        "logs": state.log_dir,
    }
