"""``sc://`` URLs: their parameters (parsed by pyspark's own ``DefaultChannelBuilder``)
and whether a server answers at their address.

Examples
--------
>>> with_params("sc://spark:15002/;token=abc", session_id="0d1e", token=None)
'sc://spark:15002/;session_id=0d1e'
"""

from __future__ import annotations

import re
import socket
from typing import Any

from kspark.errors import ServerError, ServerUnreachableError

__all__ = ["check_reachable", "params", "redact", "with_params"]

_TOKEN = re.compile(r"(token=)[^;\s'\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the value of every ``token=`` parameter hidden, for messages and logs.

    Examples
    --------
    >>> redact("sc://h:1/;token=s3cret;user_id=u")
    'sc://h:1/;token=***;user_id=u'
    """
    return _TOKEN.sub(r"\1***", text)


def _builder(url: str) -> Any:
    from pyspark.errors import PySparkValueError
    from pyspark.sql.connect.client import DefaultChannelBuilder

    try:
        return DefaultChannelBuilder(url)
    except PySparkValueError as exc:
        # pyspark's message may quote the URL too: neither may show the token
        raise ServerError(f"bad Spark Connect URL {redact(url)!r}: {redact(str(exc))}") from None


def params(url: str) -> dict[str, str]:
    """The ``;key=value`` parameters of ``url``.

    Examples
    --------
    >>> params("sc://h:1/;user_id=u;token=t")
    {'user_id': 'u', 'token': 't'}
    """
    # pyspark keeps them in _params and offers no public way to list them all
    return dict(_builder(url)._params)


def with_params(url: str, **changes: str | None) -> str:
    """``url`` with parameters set (a None value removes the parameter).

    Examples
    --------
    >>> with_params("sc://h:1", session_id="s", user_id="u")
    'sc://h:1/;session_id=s;user_id=u'
    >>> with_params("sc://h:1/;session_id=s", session_id=None)
    'sc://h:1'
    """
    builder = _builder(url)
    current = dict(builder._params)
    for key, value in changes.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    base = f"sc://{builder.url.netloc}"
    return base + ("/;" + ";".join(f"{k}={v}" for k, v in current.items()) if current else "")


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail fast: pyspark retries an unreachable server for minutes before it gives up."""
    builder = _builder(url)
    host, port = builder.url.hostname, builder.url.port or 15002
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
