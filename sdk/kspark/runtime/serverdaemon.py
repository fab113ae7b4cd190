"""The Python daemon of the servers kspark starts: ``kspark_server.daemon`` where the
workers can run it (docs/design/server-settings.md).

Spark forks every Python worker from one daemon per executor, whose module
``spark.python.daemon.module`` names. kspark's daemon imports pandas, pyarrow, pyspark's
worker and kspark's operators before it forks, so that the workers of a query's first
batch start with them imported (:mod:`kspark_server.daemon`). A daemon module that the
workers' Python cannot import would fail every Python worker, so the setting is made
only after that Python, in the server's environment, has run
``python -m kspark_server.daemon --check``; elsewhere the server keeps pyspark's daemon.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping

__all__ = ["DAEMON_MODULE", "DAEMON_SETTING", "daemon_conf"]

_log = logging.getLogger(__name__)

#: The setting that names the module of Spark's Python daemon (pyspark's by default).
DAEMON_SETTING = "spark.python.daemon.module"
#: kspark's daemon module.
DAEMON_MODULE = "kspark_server.daemon"
#: The check takes a Python start and pyspark's import; a wedged one must not hold a
#: server's start for long.
_CHECK_TIMEOUT = 60.0


def daemon_conf(
    *, master: str, python: str, env: Mapping[str, str], cwd: str, conf: Mapping[str, str]
) -> dict[str, str]:
    """``{DAEMON_SETTING: DAEMON_MODULE}`` where the server's workers can run kspark's
    daemon, else ``{}``.

    ``python`` and ``env`` are the workers' interpreter and environment, ``cwd`` the
    directory the server runs in (``python -m`` puts it first on the path). Only local
    masters (``local[N]``, ``local-cluster[...]``), whose workers run on this machine,
    are checked; a ``conf`` that sets the daemon module or turns the daemon off keeps
    its choice.

    Examples
    --------
    >>> daemon_conf(master="spark://h:7077", python="python", env={}, cwd=".", conf={})
    {}
    >>> daemon_conf(master="local[2]", python="python", env={}, cwd=".",
    ...             conf={DAEMON_SETTING: "pyspark.daemon"})
    {}
    """
    if not master.startswith("local"):
        return {}
    if DAEMON_SETTING in conf or conf.get("spark.python.use.daemon", "true") == "false":
        return {}
    cmd = [python, "-m", DAEMON_MODULE, "--check"]
    try:
        done = subprocess.run(
            cmd,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_CHECK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        _log.info("the workers keep pyspark's daemon: %s failed: %s", " ".join(cmd), e)
        return {}
    if done.returncode != 0:
        _log.info(
            "the workers keep pyspark's daemon: %s exited with %d: %s",
            " ".join(cmd),
            done.returncode,
            done.stderr.decode(errors="replace").strip()[-500:],
        )
        return {}
    return {DAEMON_SETTING: DAEMON_MODULE}
