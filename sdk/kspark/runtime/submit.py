"""Remote submission: start an app on a Spark Connect server, and find it again later.

``submit`` starts a topology as a long-running streaming query on a remote server and
returns at once; the query keeps running after the client process exits. ``status`` and
``stop`` act on it from any later process. They back ``kspark submit``, ``kspark status``
and ``kspark stop``.

How an app outlives its client (measured on Spark 4.3):

- A streaming query belongs to the Spark Connect *session* that started it, keyed by
  ``(user_id, session_id)``. Only that session sees it: ``spark.streams`` of another session
  does not list it. So ``submit`` opens a session with a fresh ``session_id`` and records it
  with the user id, the query id and the run id in a small JSON *handle*; ``status`` and
  ``stop`` reconnect with ``sc://host:port/;session_id=<id>;user_id=<user>``.
- The client does not release its session at exit (unless ``SPARK_CONNECT_RELEASE_SESSION_ON_EXIT``
  is set, which ``submit`` ignores), so the query keeps running when ``kspark submit`` ends.
- The server closes a session that has received no request for
  ``spark.connect.session.manager.defaultSessionTimeout`` (60 minutes by default; ``-1``:
  never), and closing a session stops its streaming queries. Every ``status`` call is a
  request on the session and restarts that clock.
- ``stop`` stops the query and then releases the session. A released session id cannot be
  used again, so each ``submit`` uses a new one.

Handles live in ``$KSPARK_HOME/apps/<application_id>.json`` (``~/.kspark/apps`` by
default). They hold no authentication token: pass the ``sc://`` URL with its ``;token=``
to ``status`` and ``stop`` when the server needs one.

Examples
--------
>>> from kspark.runtime.submit import with_params
>>> with_params("sc://spark:15002/;token=abc", session_id="0d1e", token=None)
'sc://spark:15002/;session_id=0d1e'
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from kspark.config import StreamsConfig
from kspark.errors import (
    AppAlreadyRunningError,
    CodeShippingError,
    ServerError,
    ServerUnreachableError,
    StreamsAppError,
    UnknownAppError,
)
from kspark.plan.nodes import TopicSpec
from kspark.plan.topology import Topology
from kspark.runtime import shipping
from kspark.runtime.app import State, StreamsApp, translate_failure
from kspark.runtime.metrics import Batches, input_rows, progress_as_dict

__all__ = [
    "AppStatus",
    "OutputInfo",
    "SubmittedApp",
    "handles_dir",
    "load_handle",
    "status",
    "stop",
    "submit",
    "with_params",
]

HANDLE_VERSION = 1
_DEFAULT_PORT = 15002
_TIMEOUT_CONF = "spark.connect.session.manager.defaultSessionTimeout"


# -- sc:// URLs ----------------------------------------------------------------------
def _split(url: str) -> tuple[str, dict[str, str]]:
    """``sc://host:port/;k=v;k=v`` as ``("host:port", {k: v})``."""
    if not url.startswith("sc://"):
        raise ServerError(f"a Spark Connect URL starts with sc://, got {url!r}")
    rest = url[len("sc://") :]
    hostport, _, tail = rest.partition("/")
    params: dict[str, str] = {}
    for part in tail.split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            params[key] = value
    return hostport, params


def with_params(url: str, **params: str | None) -> str:
    """``url`` with parameters set (a None value removes the parameter).

    Examples
    --------
    >>> with_params("sc://h:1", session_id="s", user_id="u")
    'sc://h:1/;session_id=s;user_id=u'
    >>> with_params("sc://h:1/;session_id=s", session_id=None)
    'sc://h:1'
    """
    hostport, current = _split(url)
    for key, value in params.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    if not current:
        return f"sc://{hostport}"
    return f"sc://{hostport}/;" + ";".join(f"{k}={v}" for k, v in current.items())


def _address(url: str) -> tuple[str, int]:
    hostport, _ = _split(url)
    host, sep, port = hostport.rpartition(":")
    if not sep:
        return hostport, _DEFAULT_PORT
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ServerError(f"bad port in Spark Connect URL {url!r}") from None


def _check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail fast: pyspark retries an unreachable server for minutes before it gives up."""
    host, port = _address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ServerUnreachableError(
            f"no Spark Connect server answers at {host}:{port} ({exc}); check the address "
            "and that the server is running",
            host=host,
            port=port,
        ) from exc


@contextlib.contextmanager
def _keep_session_at_exit() -> Iterator[None]:
    # pyspark reads this when a client is created: with it set, the client releases its
    # session at process exit, which would stop the submitted query.
    saved = os.environ.pop("SPARK_CONNECT_RELEASE_SESSION_ON_EXIT", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SPARK_CONNECT_RELEASE_SESSION_ON_EXIT"] = saved


def _session(url: str) -> Any:
    # the same session factory as connect(url): it also works around pyspark-client's
    # doctest guard (kspark[client])
    from kspark.runtime.server import _remote_session

    with _keep_session_at_exit():
        return _remote_session(url)


def _detach(spark: Any) -> None:
    """Close the connection but keep the server-side session (and its queries)."""
    with contextlib.suppress(Exception):
        spark.client.close()


def _release(spark: Any) -> None:
    """Release the server-side session; Spark stops any query still running in it."""
    with contextlib.suppress(Exception):
        spark.stop()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _session_closed(exc: BaseException) -> bool:
    from pyspark.errors import PySparkException

    return (
        isinstance(exc, PySparkException) and exc.getCondition() == "INVALID_HANDLE.SESSION_CLOSED"
    )


# -- handles ---------------------------------------------------------------------------
def handles_dir() -> str:
    """Where handles are kept: ``$KSPARK_HOME/apps``, by default ``~/.kspark/apps``."""
    home = os.environ.get("KSPARK_HOME") or os.path.join(os.path.expanduser("~"), ".kspark")
    return os.path.join(home, "apps")


def _handle_path(app_id: str, directory: str | None = None) -> str:
    return os.path.join(directory or handles_dir(), f"{app_id}.json")


@attrs.frozen(kw_only=True)
class OutputInfo:
    """Where a sink of the app writes, as the server sees it.

    ``location`` is a directory for file topics (batch ``N`` goes to
    ``<location>/batch_id=N``), a table name, or ``kafka://<bootstrap servers>/<topic>``.
    """

    name: str
    format: str
    location: str
    dead_letter_queue: bool = False

    @classmethod
    def of(cls, topic: TopicSpec, dead_letter_queue: bool = False) -> OutputInfo:
        if topic.format == "kafka":
            servers = topic.option_dict().get("kafka.bootstrap.servers", "?")
            location = f"kafka://{servers}/{topic.name}"
        else:
            location = topic.path or topic.name
        return cls(
            name=topic.name,
            format=topic.format,
            location=location,
            dead_letter_queue=dead_letter_queue,
        )

    def describe(self) -> str:
        where = self.location
        if self.format in ("jsonl", "parquet", "csv"):
            where = f"{self.location.rstrip('/')}/batch_id=<n>/"
        kind = "dead letters" if self.dead_letter_queue else self.format
        return f"{self.name} ({kind}) -> {where}"


@attrs.frozen(kw_only=True)
class SubmittedApp:
    """The handle of a submitted app: what ``status`` and ``stop`` need to find it again.

    Attributes
    ----------
    app_id
        ``StreamsConfig.application_id``; also the streaming query's name.
    remote
        The server's ``sc://`` URL, without ``token``, ``session_id`` or ``user_id``.
    session_id, user_id
        The Spark Connect session that owns the query.
    query_id, run_id
        Spark's ids of the query (stable across restarts on one checkpoint) and of this run.
    checkpoint
        The query's checkpoint on the server's file system.
    outputs
        The app's sinks, and its dead-letter topic if it has one.
    """

    app_id: str
    remote: str
    session_id: str
    user_id: str | None
    query_id: str
    run_id: str
    checkpoint: str
    outputs: tuple[OutputInfo, ...] = ()
    modules: tuple[str, ...] = ()
    topology: str | None = None
    submitted_at: str = ""
    session_timeout: str = "60m"
    status_message: str = ""
    #: filled in by ``stop``: the final status as a dict
    final: dict[str, Any] | None = attrs.field(default=None, eq=False)
    #: where the handle is stored (not part of the JSON)
    path: str | None = attrs.field(default=None, eq=False)

    def url(self, remote: str | None = None) -> str:
        """The URL that reconnects to the app's session (``remote`` may add a token)."""
        return with_params(remote or self.remote, session_id=self.session_id, user_id=self.user_id)

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=True)
        d.pop("path")
        d["version"] = HANDLE_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str | None = None) -> SubmittedApp:
        values = {k: v for k, v in data.items() if k in attrs.fields_dict(cls) and k != "path"}
        values["outputs"] = tuple(OutputInfo(**o) for o in values.get("outputs") or ())
        values["modules"] = tuple(values.get("modules") or ())
        return cls(**values, path=path)

    def save(self, directory: str | None = None) -> SubmittedApp:
        """Write the handle (owner-only permissions: the session id gives control)."""
        path = self.path or _handle_path(self.app_id, directory)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
        return attrs.evolve(self, path=path)

    def summary(self) -> str:
        lines = [
            f"app        {self.app_id}",
            f"status     {self.status_message or 'RUNNING'}",
            f"query id   {self.query_id}",
            f"run id     {self.run_id}",
            f"session    {self.url()}",
            f"checkpoint {self.checkpoint}",
        ]
        lines += [f"output     {o.describe()}" for o in self.outputs]
        if self.modules:
            lines.append(f"shipped    {', '.join(self.modules)}")
        if self.path:
            lines.append(f"handle     {self.path}")
        lines.append(
            f"lifetime   runs on the server after this client exits; the server stops it "
            f"{_lifetime(self.session_timeout)}; `kspark stop --app-id {self.app_id}` ends it"
        )
        return "\n".join(lines)


def _lifetime(timeout: str) -> str:
    if timeout.strip() in ("-1", "-1ms", "-1s"):
        return "only if the session is released (session timeout -1: never by inactivity)"
    return f"when its session has had no request for {timeout} (each `kspark status` is one)"


def load_handle(app_id: str, directory: str | None = None) -> SubmittedApp:
    """The handle that ``submit`` wrote for ``app_id``.

    Raises
    ------
    UnknownAppError
        No app with this id was submitted from this client (no handle file).
    """
    path = _handle_path(app_id, directory)
    return _read_handle(path, app_id)


def _read_handle(path: str, app_id: str | None = None) -> SubmittedApp:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UnknownAppError(
            f"no app {app_id or path!r} was submitted from this client (no handle at {path}); "
            "pass --session-id to find an app submitted elsewhere, or check the id",
            application_id=app_id,
            handle=path,
        ) from None
    except (OSError, ValueError) as exc:
        raise UnknownAppError(f"cannot read app handle {path}: {exc}", handle=path) from exc
    return SubmittedApp.from_dict(data, path=path)


# -- status ----------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class AppStatus:
    """What ``status`` and ``stop`` found on the server.

    ``batches``, ``input_records`` and ``output_records`` count the micro-batches of the
    current run that Spark still keeps in memory (the last 100 by default);
    ``last_batch_id`` counts over the checkpoint's whole life.
    """

    app_id: str
    state: State
    message: str
    query_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    batches: int = 0
    input_records: int = 0
    output_records: int = 0
    last_batch_id: int | None = None
    last_progress: dict[str, Any] | None = None
    error: str | None = None
    checkpoint: str | None = None
    outputs: tuple[OutputInfo, ...] = ()

    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=True)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppStatus:
        values = {k: v for k, v in data.items() if k in attrs.fields_dict(cls)}
        values["state"] = State(values["state"])
        values["outputs"] = tuple(OutputInfo(**o) for o in values.get("outputs") or ())
        return cls(**values)

    def summary(self) -> str:
        lines = [f"app        {self.app_id}", f"state      {self.state.value} ({self.message})"]
        if self.query_id:
            lines.append(f"query id   {self.query_id}  run id {self.run_id}")
        lines.append(
            f"batches    {self.batches} in this run"
            + (f" (last batch id {self.last_batch_id})" if self.last_batch_id is not None else "")
        )
        lines.append(f"records    {self.input_records:,} in, {self.output_records:,} out")
        p = self.last_progress
        if p:
            lines.append(
                f"last batch {p.get('batchId')} at {p.get('timestamp')}: "
                f"{p.get('numInputRows')} rows, "
                f"{float(p.get('processedRowsPerSecond') or 0):,.0f} rows/s"
            )
        if self.error:
            lines.append(f"error      {self.error}")
        if self.checkpoint:
            lines.append(f"checkpoint {self.checkpoint}")
        lines += [f"output     {o.describe()}" for o in self.outputs]
        return "\n".join(lines)


_PROGRESS_KEYS = (
    "batchId",
    "timestamp",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
)


def _last_progress(p: dict[str, Any]) -> dict[str, Any]:
    """The figures of a progress that the status keeps, with ``numInputRows`` counted as
    the app counts records in (Spark's counts a forked source once per branch)."""
    out = {k: p.get(k) for k in _PROGRESS_KEYS}
    out["numInputRows"] = input_rows(p)
    return out


def _status_of(query: Any, handle: SubmittedApp) -> AppStatus:
    """Read a query (active, or stopped and still in the server's cache) into AppStatus."""
    active = bool(query.isActive)
    progresses = [progress_as_dict(p) for p in (query.recentProgress or [])]
    seen = Batches()
    for p in progresses:
        seen.add(p)
    last = progresses[-1] if progresses else None
    error: str | None = None
    if not active:
        exc = query.exception()
        if exc is not None:
            error = _failure(exc, handle.app_id)
    if active:
        state, message = State.RUNNING, str((query.status or {}).get("message", ""))
    elif error:
        state, message = State.ERROR, "the query failed"
    else:
        state, message = State.NOT_RUNNING, "the query was stopped"
    return AppStatus(
        app_id=handle.app_id,
        state=state,
        message=message,
        query_id=str(query.id),
        run_id=str(query.runId),
        session_id=handle.session_id,
        batches=seen.totals.batches,
        input_records=seen.totals.records_in,
        output_records=seen.totals.records_out,
        last_batch_id=max((b for _, b in seen.keys()), default=None),
        last_progress=_last_progress(last) if last else None,
        error=error,
        checkpoint=handle.checkpoint,
        outputs=handle.outputs,
    )


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _failure(exc: Any, app_id: str) -> str:
    """The message of a failed query; a module the workers could not import is named as
    such (the plan text in Spark's message can otherwise be mistaken for the cause)."""
    m = _MISSING_MODULE.search(str(exc))
    if m is not None:
        return str(
            CodeShippingError(
                f"app {app_id} failed: the server's Python workers cannot import module "
                f"{m.group(1)!r}; kspark ships the topology's modules and their local packages, "
                "so install the module on the server, or make it part of a local package the "
                "topology uses",
                module=m.group(1),
                application_id=app_id,
            )
        )
    return str(translate_failure(exc, app_id))


def _gone(handle: SubmittedApp, message: str) -> AppStatus:
    if handle.final is not None:  # ``stop`` recorded how it ended
        final = AppStatus.from_dict(handle.final)
        return attrs.evolve(final, message=f"{final.message}; {message}")
    return AppStatus(
        app_id=handle.app_id,
        state=State.NOT_RUNNING,
        message=message,
        query_id=handle.query_id or None,
        run_id=handle.run_id or None,
        session_id=handle.session_id,
        checkpoint=handle.checkpoint,
        outputs=handle.outputs,
    )


def _find_query(spark: Any, handle: SubmittedApp) -> Any:
    """The app's query in its session: active, or stopped within the server's cache
    time (an hour); None if the session does not know it."""
    if handle.query_id:
        query = spark.streams.get(handle.query_id)
        if query is not None:
            return query
        from pyspark.sql.connect.streaming.query import StreamingQuery

        cached = StreamingQuery(spark, handle.query_id, handle.run_id, handle.app_id)
        try:
            cached.isActive  # noqa: B018 - asks the server's cache of stopped queries
        except Exception:
            return None
        return cached
    for query in spark.streams.active:  # a handle built from --session-id alone
        if query.name == handle.app_id:
            return query
    return None


def _resolve(
    app_id: str | None,
    remote: str | None,
    handle: SubmittedApp | str | None,
    session_id: str | None,
    directory: str | None,
) -> tuple[SubmittedApp, str]:
    """The handle to act on and the URL to reach its session."""
    if isinstance(handle, SubmittedApp):
        found = handle
    elif handle is not None:
        found = _read_handle(handle, app_id)
    elif session_id is not None:
        if app_id is None or remote is None:
            raise UnknownAppError("--session-id needs --app-id and --remote too")
        found = SubmittedApp(
            app_id=app_id,
            remote=with_params(remote, token=None, session_id=None),
            session_id=session_id,
            user_id=_split(remote)[1].get("user_id"),
            query_id="",
            run_id="",
            checkpoint="",
        )
    elif app_id is not None:
        found = load_handle(app_id, directory)
    else:
        raise UnknownAppError("name the app: give its app id or its handle")
    base = remote or found.remote
    _check_reachable(base)
    return found, found.url(with_params(base, session_id=None, user_id=None))


def _status_in(spark: Any, handle: SubmittedApp) -> tuple[AppStatus, bool]:
    """The app's status, and whether it was read from the server (not from the handle)."""
    try:
        query = _find_query(spark, handle)
    except Exception as exc:
        if _session_closed(exc):
            return _gone(
                handle,
                "its session was closed (released by stop, or expired after the session "
                "timeout), which stops its query",
            ), False
        raise
    if query is None:
        return _gone(
            handle,
            "its session does not know the query (the server restarted, or the query "
            "stopped over an hour ago)",
        ), False
    return _status_of(query, handle), True


def _record_final(handle: SubmittedApp, result: AppStatus, live: bool) -> None:
    """Keep how the app ended in its handle: the server forgets it an hour later."""
    if (
        handle.path
        and handle.final is None
        and live
        and result.state
        in (
            State.NOT_RUNNING,
            State.ERROR,
        )
    ):
        attrs.evolve(handle, final=result.to_dict()).save()


def status(
    app_id: str | None = None,
    *,
    remote: str | None = None,
    handle: SubmittedApp | str | None = None,
    session_id: str | None = None,
    handles_directory: str | None = None,
) -> AppStatus:
    """The state and progress of a submitted app, from any process.

    Parameters
    ----------
    app_id
        The app's ``application_id``; its handle is read from :func:`handles_dir`.
    remote
        The server's ``sc://`` URL, with ``;token=`` if it needs one. Defaults to the URL in
        the handle (which holds no token).
    handle
        A :class:`SubmittedApp` or the path of a handle file, instead of ``app_id``.
    session_id
        With ``app_id`` and ``remote``: find an app submitted from another client, by its
        session id (printed by ``kspark submit``).

    Raises
    ------
    UnknownAppError
        No handle for ``app_id``.
    ServerUnreachableError
        Nothing listens at the server's address.

    Examples
    --------
    >>> st = status("payments", remote="sc://spark:15002/;token=...")  # doctest: +SKIP
    >>> st.state, st.input_records  # doctest: +SKIP
    (<State.RUNNING: 'RUNNING'>, 120000)
    """
    found, url = _resolve(app_id, remote, handle, session_id, handles_directory)
    # Read-only on the server: it never releases the session (a failed query's error
    # stays readable there for an hour); the request itself keeps the session alive.
    spark = _session(url)
    try:
        result, live = _status_in(spark, found)
        _record_final(found, result, live)
        return result
    finally:
        _detach(spark)


def _no_active_queries(spark: Any) -> bool:
    try:
        return not spark.streams.active
    except Exception:
        return False


# -- stop ------------------------------------------------------------------------------
def stop(
    app_id: str | None = None,
    *,
    remote: str | None = None,
    handle: SubmittedApp | str | None = None,
    session_id: str | None = None,
    handles_directory: str | None = None,
    release_session: bool = True,
) -> AppStatus:
    """Stop a submitted app and release its session; returns its final status.

    Spark's ``StreamingQuery.stop()`` interrupts the micro-batch in progress, if any; the
    checkpoint keeps the app consistent, and a later run (``submit`` again with the same
    ``application_id`` and ``checkpoint_dir``) redoes that batch. Stopping an app that is
    not running only reports its state. The parameters are those of :func:`status`;
    ``release_session=False`` keeps the session open.

    Examples
    --------
    >>> print(stop("payments", remote="sc://spark:15002").summary())  # doctest: +SKIP
    """
    found, url = _resolve(app_id, remote, handle, session_id, handles_directory)
    spark = _session(url)
    try:
        try:
            query = _find_query(spark, found)
        except Exception as exc:
            if not _session_closed(exc):
                raise
            query = None
        if query is not None and query.isActive:
            query.stop()  # returns when the query has stopped
        result, live = _status_in(spark, found)
        if result.state is State.RUNNING:  # stop() returned before the query ended
            result = attrs.evolve(result, state=State.PENDING_SHUTDOWN)
        _record_final(found, result, live)
        if release_session and live and _no_active_queries(spark):
            _release(spark)
        return result
    finally:
        _detach(spark)


# -- submit ----------------------------------------------------------------------------
def _outputs(app: StreamsApp) -> tuple[OutputInfo, ...]:
    seen: dict[str, OutputInfo] = {}
    for part in app.compiled().sinks:
        seen.setdefault(part.topic.name, OutputInfo.of(part.topic))
    dlq = app.config.dead_letter_queue_topic
    if dlq is not None:
        seen.setdefault(dlq.name, OutputInfo.of(dlq, dead_letter_queue=True))
    return tuple(seen.values())


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _already_running(
    app_id: str, where: str, handle: SubmittedApp | None = None
) -> AppAlreadyRunningError:
    extra = f" (query {handle.query_id}, session {handle.session_id})" if handle else ""
    return AppAlreadyRunningError(
        f"app {app_id} is already running {where}{extra}; stop it first with "
        f"`kspark stop --app-id {app_id}`, or choose another application_id and checkpoint_dir",
        application_id=app_id,
    )


def _wait_first_progress(query: Any, wait: float) -> None:
    """Wait until the query finished its first trigger or stopped, at most ``wait`` s."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not query.isActive or query.lastProgress is not None:
            return
        # a short wait on the server for termination, instead of sleeping on the client
        with contextlib.suppress(Exception):
            if query.awaitTermination(0.5):
                return


def submit(
    topology: Topology,
    config: StreamsConfig,
    remote: str,
    *,
    modules: Iterable[str] = (),
    topology_ref: str | None = None,
    wait: float = 60.0,
    handles_directory: str | None = None,
) -> SubmittedApp:
    """Start ``topology`` on the Spark Connect server ``remote`` and leave it running.

    It ships ``kspark_server`` and the topology's code (with the local packages of
    ``modules``) the way :meth:`StreamsApp.start` does, starts the app's streaming query in
    a new session, waits for its first trigger (at most ``wait`` seconds), and writes the
    handle that :func:`status` and :func:`stop` use.

    Parameters
    ----------
    topology, config
        As for :class:`StreamsApp`. Paths are on the server's file system.
    remote
        ``sc://host:port``, with ``;token=...`` if the server needs it.
    modules
        Modules to ship in any case, such as the module of a ``module:attr`` reference;
        each is shipped with its top-level package when that is local.
    topology_ref
        The ``module:attr`` the topology came from, recorded in the handle.
    wait
        Seconds to wait for the first micro-batch, so that a failure at start (such as
        code the server cannot load) is reported here; 0 returns at once.

    Returns
    -------
    SubmittedApp
        The handle, already saved.

    Raises
    ------
    ServerUnreachableError
        Nothing listens at ``remote``.
    AppAlreadyRunningError
        The app's query (same checkpoint) already runs on the server.
    StreamsAppError
        The query failed during ``wait``; its handle then records the failure.

    Examples
    --------
    >>> handle = submit(topology, StreamsConfig(application_id="payments",
    ...                 checkpoint_dir="/data/chk/payments"), "sc://spark:15002")  # doctest: +SKIP
    >>> print(handle.summary())  # doctest: +SKIP
    """
    _check_reachable(remote)
    app_id = config.application_id
    base = with_params(remote, session_id=None)
    base_params = _split(base)[1]
    user_id = base_params.get("user_id") or os.environ.get("SPARK_USER") or os.environ.get("USER")
    stored_remote = with_params(base, token=None, user_id=None)
    with contextlib.suppress(UnknownAppError):
        previous = load_handle(app_id, handles_directory)
        if previous.final is None and previous.remote == stored_remote:
            if status(handle=previous, remote=with_params(base, user_id=None)).running:
                raise _already_running(app_id, f"on {stored_remote}", previous)

    session_id = str(uuid.uuid4())
    spark = _session(with_params(base, session_id=session_id, user_id=user_id))
    started = False
    try:
        # Spark's default silently stops another run of the same checkpoint (in any
        # session) when a new run starts; refuse instead.
        spark.conf.set("spark.sql.streaming.stopActiveRunOnRestart", "false")
        timeout = spark.conf.get(_TIMEOUT_CONF, None) or "60m"
        app = StreamsApp(topology, config, session=spark)
        # StreamsApp.start() ships the topology's code; this adds the named modules and
        # their packages to what it registers (cloudpickle registration is global).
        shipped = shipping.ship(
            topology,
            extra=[config.processing_exception_handler, config.production_exception_handler],
            names=list(modules),
        )
        try:
            app.start()
        except StreamsAppError:
            raise
        except Exception as exc:
            if "already active" in str(exc):
                raise _already_running(
                    app_id, f"on {stored_remote} (its checkpoint is in use)"
                ) from exc
            raise StreamsAppError(
                f"app {app_id} could not start: {_first_line(exc)}", application_id=app_id
            ) from exc
        query = app.query
        started = True
        if wait > 0:
            _wait_first_progress(query, wait)
        handle = SubmittedApp(
            app_id=app_id,
            remote=stored_remote,
            session_id=session_id,
            user_id=user_id,
            query_id=str(query.id),
            run_id=str(query.runId),
            checkpoint=app.checkpoint_location,
            outputs=_outputs(app),
            modules=tuple(shipped),
            topology=topology_ref,
            submitted_at=_now(),
            session_timeout=str(timeout),
        )
        current = _status_of(query, handle)
        handle = attrs.evolve(handle, status_message=f"{current.state.value} ({current.message})")
        if not current.running:
            handle = attrs.evolve(handle, final=current.to_dict())
        handle = handle.save(handles_directory)
        if current.state is State.ERROR:
            _release(spark)
            raise StreamsAppError(
                f"app {app_id} failed right after it started: {current.error}",
                application_id=app_id,
                handle=handle.path,
            )
        return handle
    except BaseException:
        if not started:
            _release(spark)  # an empty session: nothing of ours runs in it
        raise
    finally:
        _detach(spark)
