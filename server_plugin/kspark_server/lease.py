"""The lease a running app keeps in its checkpoint, so that any session can see it runs.

Spark Connect shows a session only its own streaming queries: an app started by
``kspark submit``, or from another notebook, is invisible to ``spark.streams``. So the
app's micro-batch writer, which runs on the server for as long as its query runs, renews
a small file, ``<checkpoint_dir>/lease/lease.json``: the app's id, a token of the run,
the host and process, and the time of the last renewal (epoch ms). It renews it at every
micro-batch and, from a thread, every :data:`HEARTBEAT_SECONDS` while the query lives; the
thread dies with the query's writer process. A lease renewed less than
:data:`FRESH_MS` ago means the app runs (``kspark.runtime.lease`` reads it; a rescale
refuses to start), unless the run that holds it said it ended.

The file is written with the server's own file functions, so only checkpoints on a file
system the server's driver mounts (a local path or ``file:`` URI) have a lease; on other
file systems the check falls back to the caller's own session.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from kspark_server.paths import normalize_path

__all__ = ["FRESH_MS", "HEARTBEAT_SECONDS", "Lease", "lease_dir", "local_path"]

#: How often a running app renews its lease.
HEARTBEAT_SECONDS = 5.0
#: A lease renewed less than this long ago belongs to a running app.
FRESH_MS = 20_000

# runs whose renewing thread has started in this process (no lock object here: this
# module is pickled by value with the writer, and a lock does not pickle; setdefault is
# atomic under the GIL)
_started: dict[str, Lease] = {}


def lease_dir(checkpoint_dir: str) -> str:
    """The lease's folder in an app's checkpoint directory."""
    return checkpoint_dir.rstrip("/") + "/lease"


def local_path(path: str) -> str | None:
    """``path`` on the local file system, or None for another file system's URI.

    >>> local_path("file:///tmp/x"), local_path("/tmp/x"), local_path("hdfs://nn/x")
    ('/tmp/x', '/tmp/x', None)
    """
    normal = normalize_path(path)
    return None if "://" in normal else normal


class Lease:
    """One run's lease (see the module)."""

    def __init__(self, folder: str, token: str, application_id: str) -> None:
        self.folder = local_path(folder)
        self.token = token
        self.application_id = application_id

    def renew(self) -> None:
        if self.folder is None:
            return
        doc = {
            "application_id": self.application_id,
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat_ms": int(time.time() * 1000),
        }
        os.makedirs(self.folder, exist_ok=True)
        # a hidden name while it is written (Spark's reader skips it), then one rename
        tmp = os.path.join(self.folder, f".lease-{self.token}.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, os.path.join(self.folder, "lease.json"))

    def keep(self) -> None:
        """Renew now, and keep renewing from a daemon thread (one per run and process)."""
        self.renew()
        if _started.setdefault(self.token, self) is not self:
            return
        threading.Thread(target=self._beat, name=f"kspark-lease-{self.token}", daemon=True).start()

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            # a failed renewal: the next micro-batch renews it, or it expires (never fail)
            with contextlib.suppress(OSError):
                self.renew()
