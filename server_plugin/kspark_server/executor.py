"""Which executor a Python worker runs on, and the local-state root it uses.

Spark does not tell a Python worker its executor's id (``TaskContext`` has no such
field), but the executor's environment and working directory do:

- ``SPARK_EXECUTOR_ID``, which Spark's Kubernetes image sets in the executor's pod;
- the log URLs a standalone worker gives its executors
  (``SPARK_LOG_URL_STDERR=...&executorId=N&...``), which their Python workers inherit;
- the executor's working directory on a standalone worker, ``<work>/<app id>/<N>/...``
  (the worker starts the executor there, and its Python workers start in it);
- otherwise the worker is in the driver (``local[N]``): ``"driver"``.

A local-state root may name its executor: ``{executor}`` in
``StreamsConfig(state_dir=...)`` is replaced by the id, so that executors that share a
machine (``local-cluster``) keep their stores apart, as executors on a cluster do on their
own disks (docs/deployment.md).

Examples
--------
>>> executor_id({"SPARK_LOG_URL_STDERR": "http://h:1/logPage/?appId=a&executorId=3&x=y"}, "/")
'3'
>>> executor_id({}, "/spark/work/app-20260101000000-0000/1/5f0c")
'1'
>>> executor_id({}, "/home/me")
'driver'
>>> expand_root("/data/state/{executor}", "2")
'/data/state/executor-2'
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

__all__ = ["PLACEHOLDER", "disk_of", "executor_id", "expand_root"]

#: What ``state_dir`` writes for the executor's id.
PLACEHOLDER = "{executor}"

_LOG_URL = re.compile(r"[?&]executorId=([^&]+)")
_WORKDIR = re.compile(r"/app-[0-9]+-[0-9]+/([0-9]+)(?:/|$)")


def executor_id(environ: Mapping[str, str] | None = None, cwd: str | None = None) -> str:
    """This worker's executor id (see the module), from ``environ`` and ``cwd`` (this
    process's by default)."""
    env = os.environ if environ is None else environ
    found = env.get("SPARK_EXECUTOR_ID")
    if found:
        return found
    for name in ("SPARK_LOG_URL_STDERR", "SPARK_LOG_URL_STDOUT"):
        m = _LOG_URL.search(env.get(name, ""))
        if m:
            return m.group(1)
    m = _WORKDIR.search(os.getcwd() if cwd is None else cwd)
    return m.group(1) if m else "driver"


def expand_root(root: str, executor: str | None = None) -> str:
    """``root`` with :data:`PLACEHOLDER` replaced by ``executor-<id>`` (this worker's)."""
    if PLACEHOLDER not in root:
        return root
    return root.replace(PLACEHOLDER, f"executor-{executor or executor_id()}")


def disk_of(root: str) -> str:
    """The disk a local-state root is on, as standby placement tells disks apart: the
    host and the expanded root (two executors of one host that share a root share their
    stores; a copy there would be no copy)."""
    return f"{socket.gethostname()}:{os.path.abspath(expand_root(root))}"
