"""kspark's own directory on the client: ``$KSPARK_HOME``, by default ``~/.kspark``.

It holds the handles of submitted apps (``apps/``), the state of a server that
``kspark server start`` started (``server/``) and the full traces of failures (``logs/``).
"""

from __future__ import annotations

import os

__all__ = ["kspark_home"]


def kspark_home(*parts: str) -> str:
    """``$KSPARK_HOME`` (default ``~/.kspark``), joined with ``parts``.

    Examples
    --------
    >>> import os
    >>> os.environ["KSPARK_HOME"] = "/tmp/ksh"
    >>> kspark_home("logs")
    '/tmp/ksh/logs'
    >>> del os.environ["KSPARK_HOME"]
    """
    home = os.environ.get("KSPARK_HOME") or os.path.join(os.path.expanduser("~"), ".kspark")
    return os.path.join(home, *parts)
