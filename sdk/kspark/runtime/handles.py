"""Handles of submitted apps: what ``kspark status`` and ``kspark stop`` need to find an
app again, kept in ``$KSPARK_HOME/apps/<application_id>.json`` (``~/.kspark/apps`` by
default)."""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

from kspark._paths import kspark_home
from kspark.config import check_application_id
from kspark.errors import UnknownAppError
from kspark.plan.nodes import TopicSpec
from kspark.runtime.urls import with_params

__all__ = ["OutputInfo", "SubmittedApp", "handles_dir", "load_handle", "read_handle"]

HANDLE_VERSION = 1


def handles_dir() -> str:
    """Where handles are kept: ``$KSPARK_HOME/apps``, by default ``~/.kspark/apps``."""
    return kspark_home("apps")


def _handle_path(app_id: str, directory: str | None = None) -> str:
    # the id becomes a file name: a validated id cannot leave the handles folder (../x)
    return os.path.join(directory or handles_dir(), f"{check_application_id(app_id)}.json")


@attrs.frozen(kw_only=True)
class OutputInfo:
    """Where a sink of the app writes, as the server sees it.

    ``location`` is a directory for file topics (``batch_id=N`` folders, or Spark's file
    sink layout: :mod:`kspark.runtime.filesink`), a table name, or ``kafka://<bootstrap servers>/<topic>``.
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
            # a folder: of batch_id=N folders, or written by Spark's file sink
            where = f"{self.location.rstrip('/')}/"
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
    return read_handle(path, app_id)


def read_handle(path: str, app_id: str | None = None) -> SubmittedApp:
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
