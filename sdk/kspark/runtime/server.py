"""Spark Connect sessions: the embedded local server, or a remote one.

``connect()`` with no URL connects to ``$KSPARK_REMOTE`` if that is set; otherwise it
starts a Spark Connect server from the installed pyspark, on loopback, on a free port, with
a random authentication token, and reuses it within the process. It stops the server at
exit; it needs full pyspark with its JVM jars (``pip install 'kspark[local]'``).
``connect("sc://host:port")`` uses a remote server and needs only the Spark Connect client
(``pip install 'kspark[client]'``). All return a Spark Connect session: the client path is
the same.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from kspark._deps import has_spark_jars, pyspark_distribution
from kspark._paths import kspark_home, local_state_dir, resolve_path
from kspark.errors import ServerError
from kspark.runtime.serverdaemon import daemon_conf
from kspark.runtime.urls import redact

__all__ = [
    "REMOTE_ENV",
    "EmbeddedServer",
    "connect",
    "default_server_conf",
    "server_arguments",
    "server_environment",
]

#: The environment variable ``connect()`` reads when it is given no URL.
REMOTE_ENV = "KSPARK_REMOTE"

_lock = threading.Lock()
_embedded: EmbeddedServer | None = None


#: Spark Connect's plan cache per session (Spark 4.3's default holds 32 plans)
PLAN_CACHE_SIZE = ("spark.connect.session.planCache.maxSize", "4096")


def default_server_conf() -> dict[str, str]:
    """Spark settings kspark's stateful operators need, plus small-machine defaults."""
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        # Spark's default checkpoint file manager renames through Hadoop's FileContext,
        # whose local file system runs `readlink` in a child process for every rename
        # without Hadoop's native library (pip's pyspark has none): each state store
        # commit, changelog and offset or commit log entry forked the server's JVM. The
        # FileSystem-based manager renames in Java; on a local disk (and HDFS) the rename
        # is as atomic (docs/design/server-settings.md).
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
        # an app's plan reads each topic once and reuses that read in every branch; the
        # session's plan cache must hold the read for the whole plan, or Spark Connect
        # translates it again into a second source of the same topic, and the sources'
        # numbers in the checkpoint change from one query start to the next
        # (docs/deployment.md)
        PLAN_CACHE_SIZE[0]: PLAN_CACHE_SIZE[1],
    }


#: The default local-state roots of the servers this process started: ``clean_up``
#: looks there too.
STARTED_LOCAL_STATE: set[str] = set()


def server_environment(
    *, home: str, python: str, token: str, workdir: str, local_state: str
) -> dict[str, str]:
    """The environment of a Spark Connect server that kspark starts (embedded or with
    ``kspark server start``): this process's, without its Spark Connect and ``PYTHONPATH``
    settings, so that the workers see only what ``python`` has; ``local_state`` is the
    default root of the stateful tasks' local stores."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SPARK_CONNECT") and k not in ("SPARK_REMOTE", "PYTHONPATH")
    }
    return {
        **inherited,
        "SPARK_HOME": workers_spark_home(home, python, workdir),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        # in the environment, not on the command line, where ps would show it
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": token,
        # the stateful operators' executor-local stores (kspark_server.localstore):
        # caches of the checkpoint's state, kept across restarts of the server
        "KSPARK_LOCAL_STATE_DIR": local_state,
    }


#: The file in ``$SPARK_HOME/python/lib`` that Spark puts first on every Python worker's
#: path (``PythonUtils.sparkPythonPath``).
_PYSPARK_ZIP = "pyspark.zip"
#: py4j's sources in ``$SPARK_HOME/python/lib``, which Spark puts on the path next: every
#: worker imports py4j (pyspark does, at its own import)
_PY4J_ZIP = re.compile(r"py4j-(?P<version>.+)-src\.zip")


def workers_spark_home(home: str, python: str, workdir: str) -> str:
    """The ``SPARK_HOME`` of a server kspark starts: ``home``, or a copy of it made of
    symbolic links, without ``python/lib/pyspark.zip`` (and py4j's zip, where the workers
    import the same py4j without it), in ``workdir/spark-home``.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the path of
    every Python process it starts, and Python cannot cache the bytecode of modules
    imported from a zip file: each process compiled pyspark again (about 0.8 s of CPU
    here) and py4j (0.03 s), and a query start waits for them (the ``foreachBatch``
    runner's among them; docs/design/server-settings.md). Without the zips the workers import the same pyspark
    and py4j from ``python``'s site-packages, with their cached bytecode.

    The copy is made only when the workers find that same pyspark without the zip:
    ``home`` is the pyspark package installed in this Python's site-packages (not a Spark
    distribution that ``SPARK_HOME`` names, nor a pyspark found through ``PYTHONPATH``,
    which the server's environment leaves out) and the workers run this Python.
    Otherwise, or where links cannot be made, ``home``. py4j's zip is left out too where
    this Python's site-packages holds py4j of the zip's version.

    Examples
    --------
    >>> import os, tempfile
    >>> home = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(home, "python", "lib"))
    >>> workers_spark_home(home, "/some/other/python", tempfile.mkdtemp()) == home
    True
    """
    import pyspark

    installed = os.path.dirname(os.path.abspath(pyspark.__file__))
    if os.path.abspath(python) != os.path.abspath(sys.executable) or not _same_dir(home, installed):
        return home
    if not any(_same_dir(os.path.dirname(installed), d) for d in _site_dirs()):
        return home
    lib = os.path.join(home, "python", "lib")
    names = sorted(os.listdir(lib)) if os.path.isdir(lib) else []
    left_out = _left_out(names)
    kept = [name for name in names if name not in left_out]
    mirror = os.path.join(workdir, "spark-home")
    mirror_lib = os.path.join(mirror, "python", "lib")
    if (
        os.path.isdir(mirror)
        and _same_dir(os.path.join(mirror, "jars"), os.path.join(home, "jars"))
        and os.path.isdir(mirror_lib)
        and sorted(os.listdir(mirror_lib)) == kept
    ):
        return mirror  # made by an earlier start of this server (``kspark server start``)
    building = tempfile.mkdtemp(prefix=".spark-home-", dir=workdir)
    try:
        for name in os.listdir(home):
            if name != "python":
                os.symlink(os.path.join(home, name), os.path.join(building, name))
        os.makedirs(os.path.join(building, "python", "lib"))
        for name in kept:
            os.symlink(os.path.join(lib, name), os.path.join(building, "python", "lib", name))
        shutil.rmtree(mirror, ignore_errors=True)
        os.rename(building, mirror)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        return home
    return mirror


def _left_out(names: list[str]) -> set[str]:
    """Which of the files ``names`` of ``$SPARK_HOME/python/lib`` the workers import from
    site-packages instead: pyspark's zip, and py4j's where this Python's site-packages
    holds py4j of the zip's version.

    Examples
    --------
    >>> sorted(_left_out(["pyspark.zip", "py4j-0.0.0-src.zip"]))
    ['pyspark.zip']
    """
    site_py4j = _site_py4j_version()
    out = {_PYSPARK_ZIP}
    for name in names:
        found = _PY4J_ZIP.fullmatch(name)
        if found is not None and found.group("version") == site_py4j:
            out.add(name)
    return out


def _site_py4j_version() -> str | None:
    """The version of the py4j that this Python imports from its site-packages; None where
    it has none there (or imports another, through ``PYTHONPATH``)."""
    import importlib

    try:
        module = importlib.import_module("py4j.version")
    except ImportError:
        return None
    package = os.path.dirname(os.path.abspath(module.__file__ or ""))
    if not any(_same_dir(os.path.dirname(package), d) for d in _site_dirs()):
        return None
    version = getattr(module, "__version__", None)
    return version if isinstance(version, str) else None


def _site_dirs() -> list[str]:
    """Where this Python finds installed packages without ``PYTHONPATH``."""
    import site

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return dirs


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def server_arguments(
    *,
    master: str,
    port: int,
    workdir: str,
    conf: Mapping[str, str],
    home: str | None = None,
    python: str | None = None,
    executor_env: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``spark-submit`` options of a Spark Connect server that kspark starts: master,
    port, the catalog, then ``conf`` (sorted).

    With ``home``, tables and their Hive catalog (a Derby metastore) live there and outlive
    the server; without it, in ``workdir``. Executors in JVMs of their own (any master but
    ``local[...]``) take ``python`` and ``executor_env`` from these settings, not from the
    server's environment.
    """
    base = home or workdir
    metastore = os.path.join(base, "metastore")
    os.makedirs(metastore, exist_ok=True)
    args = [
        "--master",
        master,
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        # tables and their catalog outlive the server, in its home (not the work dir, which
        # stop() deletes): Spark's in-memory catalog would forget every table
        "--conf",
        f"spark.sql.warehouse.dir={os.path.join(base, 'warehouse')}",
        "--conf",
        "spark.sql.catalogImplementation=hive",
        "--conf",
        "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName="
        f"{os.path.join(metastore, 'metastore_db')};create=true",
        "--conf",
        f"spark.driver.extraJavaOptions=-Dderby.system.home={metastore}",
        # Hive's scratch space, per server: a shared /tmp/hive may belong to another user
        "--conf",
        f"spark.hadoop.hive.exec.scratchdir={os.path.join(workdir, 'hive')}",
        "--conf",
        f"spark.hadoop.hive.exec.local.scratchdir={os.path.join(workdir, 'hive-local')}",
    ]
    if not master.startswith("local["):
        if python:
            args += ["--conf", f"spark.pyspark.python={python}"]
        for k, v in sorted((executor_env or {}).items()):
            args += ["--conf", f"spark.executorEnv.{k}={v}"]
    for k, v in sorted(conf.items()):
        args += ["--conf", f"{k}={v}"]
    return args


def free_port() -> int:
    """A free TCP port on loopback (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    """The Spark installation the embedded server runs from.

    ``SPARK_HOME`` if set, else the installed pyspark package, which has the JVM jars and
    ``bin/spark-submit`` only when it is full pyspark (``kspark[local]``), not the thin
    client ``pyspark-client`` (``kspark[client]``).
    """
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    if not has_spark_jars(home):
        source = (
            "SPARK_HOME" if os.environ.get("SPARK_HOME") else (pyspark_distribution() or "pyspark")
        )
        raise ServerError(
            f"the embedded Spark Connect server needs full pyspark with its JVM jars, and "
            f"{home} ({source}) has no bin/spark-submit and jars/. Install it with "
            "pip install 'kspark[local]' (in an environment without pyspark-client), or "
            "connect to a running server with kspark.connect('sc://host:port')",
            spark_home=home,
            install="kspark[local]",
        )
    return home


def _import_connect_client() -> None:
    """Import pyspark's Spark Connect client, around its doctest guard.

    On import, ``pyspark.sql.connect`` takes a process whose ``__main__`` has neither a spec
    nor a file (``python -c``) for a doctest run and imports ``pyspark.testing``, which
    calls ``sys.exit`` when it finds no Spark installation: always so with the thin client
    ``pyspark-client``. A ``SPARK_HOME`` for the length of that one import avoids the exit.
    """
    if "pyspark.sql.connect.session" in sys.modules or "SPARK_HOME" in os.environ:
        return
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return
    if hasattr(main, "__file__") or hasattr(sys, "ps1"):
        return
    import pyspark

    os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    try:
        import pyspark.sql.connect.session
    finally:
        os.environ.pop("SPARK_HOME", None)


#: The sessions kspark created, with their server's address, so that they can be dropped at
#: exit when that server is gone (``_drop_orphaned_sessions``).
_sessions: weakref.WeakKeyDictionary[Any, tuple[str, int]] = weakref.WeakKeyDictionary()

#: How long the exit hook waits for a session's server to accept a connection.
_EXIT_PROBE_TIMEOUT = 1.0


def _remote_session(url: str) -> Any:
    _import_connect_client()
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(url).create()
    # pyspark makes a new session this thread's active one only when there is none: after
    # a server restart the old, dead session stayed active, and building an operator
    # (pyspark parses a UDF's schema through the active session) failed with
    # NO_ACTIVE_SESSION. The session kspark hands out is the one its calls use.
    active = getattr(type(session), "_active_session", None)
    if active is not None:
        active.session = session
    _track(session, url)
    return session


def _server_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of an ``sc://`` URL; Spark Connect's default port is 15002."""
    parts = urlsplit(url)
    return parts.hostname or "localhost", parts.port or 15002


def _track(session: Any, url: str) -> None:
    _sessions[session] = _server_address(url)
    # Reattachable execution releases each finished result stream from a background thread
    # pool that retries, with backoff of up to a minute, while the server does not answer;
    # Python joins those threads before any exit hook runs, so a client whose server was
    # killed could not end for minutes. kspark's calls return small results, for which a
    # reattach after a dropped stream buys little: its sessions run without it.
    with contextlib.suppress(Exception):
        session.client.disable_reattachable_execute()
    # atexit runs the hook registered last first. Creating the session registered its
    # client's cleanup (pyspark's SparkConnectClient._on_exit), so moving kspark's hook
    # behind it makes the hook run before every session's own cleanup.
    atexit.unregister(_drop_orphaned_sessions)
    atexit.register(_drop_orphaned_sessions)


def accepts_connections(host: str, port: int, timeout: float) -> bool:
    """Whether something listens at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _drop_orphaned_sessions(timeout: float = _EXIT_PROBE_TIMEOUT) -> list[Any]:
    """Close, without a single RPC, the sessions whose server no longer accepts connections.

    At exit, pyspark's client cleans up server-side caches and retries with backoff while
    the server does not answer: a process whose server was killed would idle for minutes
    before it ends. A closed client skips that cleanup. A session whose server is up is
    left to pyspark, which releases it as usual.

    Returns
    -------
    list
        The sessions it closed.
    """
    dropped = []
    for session, (host, port) in list(_sessions.items()):
        client = getattr(session, "client", None)
        if client is None or client.is_closed or accepts_connections(host, port, timeout):
            continue
        with contextlib.suppress(Exception):
            # no retries for anything still in flight, then close the channel; close()
            # sends no RPC, and pyspark's exit hook skips a closed client
            client.set_retry_policies([])
            client.close()
        dropped.append(session)
    return dropped


def _start_watchdog(server_pid: int) -> subprocess.Popen[bytes]:
    """A process that stops the server's process group ``server_pid`` when this process
    dies, however it dies (:mod:`kspark.runtime.watchdog`)."""
    # the folder kspark is imported from, for a client that found it through sys.path
    # alone: the watchdog must import the same kspark
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    return subprocess.Popen(
        [sys.executable, "-m", "kspark.runtime.watchdog", str(os.getpid()), str(server_pid)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # a Ctrl-C of the client's terminal goes to the client, which stops the server
        start_new_session=True,
    )


def _answers_as_our_server(port: int, token: str, timeout: float) -> bool:
    """Whether a Spark Connect server that accepts ``token`` answers on ``port``: a bare
    open port may be another program's, which took it after :func:`free_port`."""
    import grpc  # type: ignore[import-untyped]  # pyspark's Spark Connect client needs it
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    request = base_pb2.AnalyzePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="kspark-probe"),
        spark_version=base_pb2.AnalyzePlanRequest.SparkVersion(),
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = base_pb2_grpc.SparkConnectServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.AnalyzePlan(
                request, metadata=[("authorization", f"Bearer {token}")], timeout=timeout
            )
        except grpc.RpcError:
            return False
        with contextlib.suppress(grpc.RpcError):  # the probe's session, at once
            stub.ReleaseSession(
                base_pb2.ReleaseSessionRequest(
                    session_id=request.session_id, user_context=request.user_context
                ),
                metadata=[("authorization", f"Bearer {token}")],
                timeout=timeout,
            )
    return True


class EmbeddedServer:
    """A local Spark Connect server process that this client started and owns.

    Parameters
    ----------
    master
        Spark master, ``local[2]`` by default (``KSPARK_MASTER`` overrides).
    conf
        Extra Spark settings.
    env
        Extra environment of the server process (for example ``PYTHONPATH``).
    python
        The interpreter of the server's Python workers; it needs pyspark, pyarrow and
        pandas. Defaults to this process's interpreter.
    home
        Where the server keeps what must outlive it: the tables it writes
        (``<home>/warehouse``) and their catalog, a Hive metastore in
        ``<home>/metastore``. Defaults to ``$KSPARK_HOME``, else ``~/.kspark``. One server
        at a time can use a home's metastore (Derby): give concurrent servers their own.
    """

    def __init__(
        self,
        *,
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        driver_memory: str = "4g",
        home: str | None = None,
    ) -> None:
        self.master = master or os.environ.get("KSPARK_MASTER", "local[2]")
        self.conf = {**default_server_conf(), **(conf or {})}
        self.extra_env = dict(env or {})
        self.python = python or sys.executable
        self.driver_memory = driver_memory
        self.home = resolve_path(home) if home is not None else kspark_home()
        self.port = 0
        self.token = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = ""
        self._workdir = ""
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def local_state_dir(self) -> str:
        """The default root of the stateful tasks' local stores, ``<home>/local-state``:
        it outlives the server, so a restarted server reuses them."""
        return local_state_dir(self.home)

    @property
    def url(self) -> str:
        """The ``sc://`` URL, with the token, that any client (another process too) can
        connect with, for example through ``KSPARK_REMOTE``."""
        return f"sc://localhost:{self.port}/;token={self.token}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def executor_pids(self) -> dict[str, int]:
        """The pids of this server's executor JVMs by executor id: a ``local-cluster``
        master starts them in the server's process group (a fault drill kills one). Empty
        in local mode, where the driver runs the tasks, and for a stopped server.

        Examples
        --------
        >>> EmbeddedServer().executor_pids()
        {}
        """
        if self.pid is None:
            return {}
        found: dict[str, int] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.getpgid(int(name)) != self.pid:
                    continue
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if any(a.endswith("CoarseGrainedExecutorBackend") for a in args):
                found[args[args.index("--executor-id") + 1]] = int(name)
        return found

    def start(self, timeout: float = 120.0, *, same_port: bool = False) -> EmbeddedServer:
        """Start the server process; wait until it listens.

        ``same_port`` restarts a server on the port (and token) it had, as a process
        manager restarting a crashed server would: clients keep their URL.
        """
        home = spark_home()
        if not (same_port and self.port):
            self.port = free_port()
        self._workdir = tempfile.mkdtemp(prefix="kspark-server-")
        self.log_path = os.path.join(self._workdir, "server.log")
        env = server_environment(
            home=home,
            python=self.python,
            token=self.token,
            workdir=self._workdir,
            local_state=self.local_state_dir,
        )
        STARTED_LOCAL_STATE.add(self.local_state_dir)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env.update(self.extra_env)
        conf = {
            **daemon_conf(
                master=self.master, python=self.python, env=env, cwd=self._workdir, conf=self.conf
            ),
            **self.conf,
        }
        cmd = [
            os.path.join(home, "bin", "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--driver-memory",
            self.driver_memory,
            *server_arguments(
                master=self.master,
                port=self.port,
                workdir=self._workdir,
                conf=conf,
                home=self.home,
                python=self.python,
                executor_env={k: env[k] for k in ("KSPARK_LOCAL_STATE_DIR", *self.extra_env)},
            ),
        ]
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self._workdir,
            start_new_session=True,
        )
        # the JVM must not outlive this process, even one killed with SIGKILL
        if self._watchdog is not None:  # a restart's (same_port) old one
            self._watchdog.kill()
            self._watchdog.wait(10)
        self._watchdog = _start_watchdog(self.process.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                tail = self._tail()
                self.stop(keep_files=True)
                raise ServerError(
                    f"the embedded Spark Connect server exited with code {code}; its log is "
                    f"{self.log_path}, last lines:\n{tail}",
                    log=self.log_path,
                )
            # not just an open port: another process may have taken it since free_port();
            # the first request also creates the server's first session, which takes a while
            left = max(deadline - time.monotonic(), 0.5)
            if accepts_connections("127.0.0.1", self.port, 0.5) and _answers_as_our_server(
                self.port, self.token, timeout=min(left, 15.0)
            ):
                return self
            time.sleep(0.2)
        tail = self._tail()
        self.stop(keep_files=True)
        raise ServerError(
            f"the embedded Spark Connect server did not answer on port {self.port} in "
            f"{timeout:.0f}s (or another program holds the port); its log is "
            f"{self.log_path}, last lines:\n{tail}",
            log=self.log_path,
        )

    def _tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0, *, keep_files: bool = False) -> None:
        """Stop the server: SIGTERM to its process group, then SIGKILL if it lingers.

        It deletes the server's work dir (its log and executor-local caches) unless
        ``keep_files``, as after a failed start, whose error names the log. Tables stay in
        :attr:`home`.
        """
        proc, self.process = self.process, None
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog.poll() is None:
            watchdog.kill()  # this process stops the server itself
            watchdog.wait(10)
        if proc is None:
            return
        stop_process_group(proc, timeout)
        if self._workdir and not keep_files:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def kill(self) -> None:
        """Kill the server at once (``kill -9``), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def session(self) -> Any:
        return _remote_session(self.url)


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM to the process group ``proc`` leads, then SIGKILL if ``proc`` has not ended
    after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def embedded_server() -> EmbeddedServer:
    """The process's embedded server, started on first use and stopped at exit."""
    global _embedded
    with _lock:
        if _embedded is None or _embedded.process is None or _embedded.process.poll() is not None:
            _embedded = EmbeddedServer().start()
            atexit.register(_embedded.stop)
        return _embedded


def connect(url: str | None = None) -> Any:
    """A Spark Connect session.

    Parameters
    ----------
    url
        ``sc://host:port`` of a Spark Connect server, possibly with parameters such as
        ``sc://host:port/;token=...``. None uses the URL in the environment variable
        ``KSPARK_REMOTE`` if it is set and not empty, and otherwise starts (or reuses) the
        embedded local server.

    Returns
    -------
    pyspark.sql.SparkSession
        A Spark Connect session.

    Raises
    ------
    ServerError
        If the URL (given or from ``KSPARK_REMOTE``) does not start with ``sc://``, or the
        embedded server does not start: also when no URL is given and the installed pyspark
        is the thin client, which has no JVM jars to start a server (install
        ``kspark[local]``).

    Examples
    --------
    >>> spark = connect()  # doctest: +SKIP
    >>> spark = connect("sc://spark-host:15002/;token=s3cret")  # doctest: +SKIP

    With ``export KSPARK_REMOTE=sc://spark-host:15002``, ``connect()`` and every
    ``StreamsApp`` without a session use that server, so the same notebook or script runs
    locally or against a cluster unchanged, also from a thin-client install.
    """
    source = "a Spark Connect URL"
    if url is None:
        url = os.environ.get(REMOTE_ENV, "").strip() or None
        source = REMOTE_ENV
    if url is None:
        return embedded_server().session()
    if not url.startswith("sc://"):
        raise ServerError(
            f"{source} must be a Spark Connect URL starting with sc://, got {redact(url)!r}"
        )
    return _remote_session(url)
