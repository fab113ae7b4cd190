"""Client-side resolution of the paths a user gives: checkpoint folders and file topics.

A relative or ``~`` path reaches the server as it is, and the server resolves it against
its own working directory and home: for the embedded server, a temporary folder that is
deleted when it stops. So kspark resolves such paths where the user wrote them, on the
client, as soon as a :class:`~kspark.Topic` or :class:`~kspark.StreamsConfig` is built.
URIs (``hdfs://``, ``s3a://``, ``file:/``, ...) are left as they are.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

__all__ = ["kspark_home", "local_state_dir", "resolve_path"]


def resolve_path(path: str) -> str:
    """``path`` as the user meant it: ``~`` expanded and made absolute against the client's
    working directory, unless it is a URI.

    Examples
    --------
    >>> import os
    >>> resolve_path("data/in") == os.path.join(os.getcwd(), "data", "in")
    True
    >>> resolve_path("~/chk") == os.path.join(os.path.expanduser("~"), "chk")
    True
    >>> resolve_path("s3a://bucket/in")
    's3a://bucket/in'
    >>> resolve_path("/data/in/")
    '/data/in'
    """
    # a one-letter "scheme" is a Windows drive letter (C:/x), a local path
    if len(urlsplit(path).scheme) > 1:
        return path
    return os.path.abspath(os.path.expanduser(path))


def kspark_home(*parts: str) -> str:
    """kspark's own folder on the client, joined with ``parts``: ``$KSPARK_HOME``, by
    default ``~/.kspark``.

    It holds the handles of submitted apps (``apps/``), the embedded server's tables
    (``warehouse/`` and ``metastore/``) and the stateful tasks' local stores
    (``local-state/``), which outlive the server, the state of a server that
    ``kspark server start`` started (``server/``) and the full traces of failures
    (``logs/``).

    Examples
    --------
    >>> import os
    >>> os.environ["KSPARK_HOME"] = "/tmp/ksh"
    >>> kspark_home()
    '/tmp/ksh'
    >>> kspark_home("logs")
    '/tmp/ksh/logs'
    >>> del os.environ["KSPARK_HOME"]
    """
    home = os.environ.get("KSPARK_HOME") or os.path.join(os.path.expanduser("~"), ".kspark")
    return os.path.join(home, *parts)


def local_state_dir(home: str | None = None) -> str:
    """The default root of the stateful tasks' local stores on a server that kspark
    starts (embedded, or ``kspark server start``): ``<home>/local-state``, ``home``
    being :func:`kspark_home` unless given. It outlives the server, so that a restarted
    server reuses its stores (``StreamsConfig(state_dir=...)`` overrides it).

    Examples
    --------
    >>> local_state_dir("/srv/kspark")
    '/srv/kspark/local-state'
    """
    return os.path.join(home or kspark_home(), "local-state")
