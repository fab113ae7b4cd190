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
>>> from kspark.runtime.submit import status
>>> status("payments").summary()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from kspark._conditions import condition as spark_condition
from kspark.bindings import bind_topology
from kspark.config import StreamsConfig
from kspark.errors import (
    AppAlreadyRunningError,
    ConfigError,
    KSparkError,
    StreamsAppError,
    UnknownAppError,
)
from kspark.plan.topology import Topology
from kspark.runtime import failures, shipping
from kspark.runtime.app import State, StreamsApp
from kspark.runtime.app_status import AppStatus, gone, status_of
from kspark.runtime.checkpoints import _exists
from kspark.runtime.handles import (
    OutputInfo,
    SubmittedApp,
    handles_dir,
    load_handle,
    read_handle,
)
from kspark.runtime.urls import check_reachable, params, with_params

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

_TIMEOUT_CONF = "spark.connect.session.manager.defaultSessionTimeout"


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


def _session_closed(exc: BaseException) -> bool:
    return spark_condition(exc) == "INVALID_HANDLE.SESSION_CLOSED"


def _already_active(exc: BaseException) -> bool:
    """Whether a query failed to start because the app's query already runs: Spark's
    condition for two sessions starting it at once, or, for the start Spark refuses
    without a condition, its message.

    Examples
    --------
    >>> from pyspark.errors import AnalysisException
    >>> _already_active(AnalysisException(message="another instance was just started",
    ...                                   errorClass="CONCURRENT_QUERY", messageParameters={}))
    True
    >>> _already_active(RuntimeError("Cannot start query with id 1 as another query with "
    ...                              "same id is already active."))
    True
    >>> _already_active(AnalysisException(message="path is already active in a cache",
    ...                                   errorClass="PATH_NOT_FOUND", messageParameters={}))
    False
    """
    condition = spark_condition(exc)
    if condition is not None:
        return condition == "CONCURRENT_QUERY"
    return "already active" in str(exc)


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
        found = read_handle(handle, app_id)
    elif session_id is not None:
        if app_id is None or remote is None:
            raise UnknownAppError("--session-id needs --app-id and --remote too")
        found = SubmittedApp(
            app_id=app_id,
            remote=with_params(remote, token=None, session_id=None),
            session_id=session_id,
            user_id=params(remote).get("user_id"),
            query_id="",
            run_id="",
            checkpoint="",
        )
    elif app_id is not None:
        found = load_handle(app_id, directory)
    else:
        raise UnknownAppError("name the app: give its app id or its handle")
    base = remote or found.remote
    check_reachable(base)
    return found, found.url(with_params(base, session_id=None, user_id=None))


def _status_in(spark: Any, handle: SubmittedApp) -> tuple[AppStatus, bool]:
    """The app's status, and whether it was read from the server (not from the handle)."""
    try:
        query = _find_query(spark, handle)
    except Exception as exc:
        if _session_closed(exc):
            return gone(
                handle,
                "its session was closed (released by stop, or expired after the session "
                "timeout), which stops its query",
            ), False
        raise
    if query is None:
        return gone(
            handle,
            "its session does not know the query (the server restarted, or the query "
            "stopped over an hour ago)",
        ), False
    return status_of(query, handle), True


def _record_final(handle: SubmittedApp, result: AppStatus, live: bool) -> None:
    """Keep how the app ended in its handle: the server forgets it an hour later."""
    ended = result.state in (State.NOT_RUNNING, State.ERROR)
    if handle.path and handle.final is None and live and ended:
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
        stopped = query is not None and query.isActive
        if stopped:
            assert query is not None
            query.stop()  # returns when the query has stopped
        result, live = _status_in(spark, found)
        result = attrs.evolve(result, stopped=stopped)
        if result.state is State.RUNNING:  # stop() returned before the query ended
            result = attrs.evolve(result, state=State.PENDING_SHUTDOWN)
        _record_final(found, result, live)
        if release_session and live and _no_active_queries(spark):
            _release(spark)
        return result
    finally:
        _detach(spark)


# -- submit ----------------------------------------------------------------------------
def client_only_path(topology: Topology, exists_on_server: Callable[[str], bool]) -> str | None:
    """What is wrong when a source of ``topology`` reads a folder that exists on this
    client but not on the server (``exists_on_server(path)``); None when nothing is.

    Paths are made absolute on the client (:func:`kspark._paths.resolve_path`) and read
    on the server's file system: on a server on another machine, a folder of the client
    is not there, and its source would wait for files forever.

    Examples
    --------
    >>> import tempfile
    >>> from kspark import StreamsBuilder, Topic
    >>> here = tempfile.mkdtemp()
    >>> b = StreamsBuilder()
    >>> b.stream(Topic.jsonl("in", here)).to(Topic.jsonl("out", here + "/out"))
    >>> client_only_path(b.build(), lambda path: True) is None
    True
    >>> print(client_only_path(b.build(), lambda path: False))  # doctest: +ELLIPSIS
    topic 'in' reads .../tmp..., a folder on this client that the server does not have...
    """
    for source in topology.sources():
        topic = source.topic
        if topic is None or topic.path is None or topic.format not in ("jsonl", "parquet", "csv"):
            continue
        path = topic.path
        if "://" in path or not os.path.isdir(path) or exists_on_server(path):
            continue
        return (
            f"topic {topic.name!r} reads {path}, a folder on this client that the server "
            "does not have: kspark makes relative paths absolute against the client's "
            "working directory, and the server reads that absolute path on its own file "
            "system. Put the data where the server can read it (shared storage) and bind "
            "the topic to that path"
        )
    return None


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
    a new session, writes the handle that :func:`status` and :func:`stop` use as soon as
    the query runs, then waits for its first trigger (at most ``wait`` seconds) and records
    the outcome in the handle. Interrupted while it waits, it leaves the app running and
    its handle saved: ``kspark stop`` ends it.

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
    # unbound topic names fail here, before any connection (StreamsApp binds them again)
    bound = bind_topology(topology, config)
    check_reachable(remote)
    app_id = config.application_id
    base = with_params(remote, session_id=None)
    base_params = params(base)
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
        problem = client_only_path(bound, lambda path: _exists(spark, path))
        if problem is not None:
            raise ConfigError(f"{problem} on {stored_remote}", option="topics")
        # StreamsApp.start() ships the topology's code; this adds the named modules and
        # their packages to what it registers (cloudpickle registration is global).
        shipped = shipping.ship(
            topology,
            extra=[config.processing_exception_handler, config.production_exception_handler],
            names=list(modules),
        )
        try:
            app.start()
        except KSparkError:  # kspark's own (the worker check's included) say what failed
            raise
        except Exception as exc:
            if _already_active(exc):
                raise _already_running(
                    app_id, f"on {stored_remote} (its checkpoint is in use)"
                ) from exc
            raise StreamsAppError(
                f"app {app_id} could not start: {failures.summarize(exc, app_id)}",
                application_id=app_id,
            ) from exc
        query = app.query
        started = True
        handle = SubmittedApp(
            app_id=app_id,
            remote=stored_remote,
            session_id=session_id,
            user_id=user_id,
            query_id=str(query.id),
            run_id=str(query.runId),
            checkpoint=app.checkpoint_location,
            outputs=app.outputs(),
            modules=tuple(shipped),
            topology=topology_ref,
            submitted_at=_now(),
            session_timeout=str(timeout),
        )
        # saved before the wait: a Ctrl-C (or a crash) while waiting leaves a running
        # query that `kspark status` and `kspark stop` can find
        handle = handle.save(handles_directory)
        if wait > 0:
            _wait_first_progress(query, wait)
        current = status_of(query, handle)
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
