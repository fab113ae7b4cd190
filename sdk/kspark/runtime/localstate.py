"""An app's executor-local stores on disk: where they are, and their clean-up.

Each stateful task keeps its state in a local store (:mod:`kspark_server.localstore`), a
cache of the durable state in the checkpoint, under a root: ``StreamsConfig(state_dir=...)``,
else the executor's ``$KSPARK_LOCAL_STATE_DIR``, which a server that kspark starts sets to
``$KSPARK_HOME/local-state`` (:func:`kspark._paths.local_state_dir`). An app's stores are
in ``<root>/<application_id>``, a folder kspark marks as its own
(``kspark_server.localstore.APP_MARKER``).

:func:`clean_up` deletes them, as Kafka Streams' ``KafkaStreams#cleanUp`` deletes an
instance's ``state.dir``: the next run rebuilds each store from the checkpoint. It deletes
only folders that hold the marker, and only under roots this process can see: on a cluster,
each executor's disk holds its own stores, which the client cannot reach
(docs/deployment.md).
"""

from __future__ import annotations

import glob
import os
import shutil

import attrs

from kspark._paths import local_state_dir
from kspark.config import check_application_id

__all__ = ["CleanUpReport", "clean_up", "roots"]


@attrs.frozen(kw_only=True)
class CleanUpReport:
    """What :func:`clean_up` did.

    Attributes
    ----------
    removed
        The app's folders of local stores that were deleted.
    skipped
        Folders named after the app that lack kspark's marker file, left as they were.
    """

    removed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line per folder.

        Examples
        --------
        >>> print(CleanUpReport(removed=("/s/app",), skipped=("/t/app",)).summary())
        removed /s/app
        skipped /t/app (no kspark marker: not kspark's local state)
        >>> CleanUpReport().summary()
        'no local state found'
        """
        lines = [f"removed {p}" for p in self.removed]
        lines += [f"skipped {p} (no kspark marker: not kspark's local state)" for p in self.skipped]
        return "\n".join(lines) or "no local state found"


def roots(state_dir: str | None = None) -> list[str]:
    """The local-state roots this process can see: ``state_dir``, this process's
    ``$KSPARK_LOCAL_STATE_DIR``, the default root of the servers this process started, and
    ``$KSPARK_HOME/local-state``; each once.

    Examples
    --------
    >>> import os
    >>> os.environ["KSPARK_HOME"] = "/tmp/ksh"
    >>> "/tmp/ksh/local-state" in roots("/data/state")
    True
    >>> roots("/data/state")[0]
    '/data/state'
    >>> del os.environ["KSPARK_HOME"]
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> for e in ("executor-0", "executor-1"):
    ...     os.makedirs(os.path.join(d, e))
    >>> [os.path.basename(r) for r in roots(os.path.join(d, "{executor}"))[:2]]
    ['executor-0', 'executor-1']
    """
    from kspark.runtime.server import STARTED_LOCAL_STATE

    found = [
        state_dir or "",
        os.environ.get("KSPARK_LOCAL_STATE_DIR", ""),
        *sorted(STARTED_LOCAL_STATE),
        local_state_dir(),
    ]
    out: list[str] = []
    for r in found:
        # a root per executor ({executor}, docs/deployment.md): each one this process sees
        for one in (
            sorted(glob.glob(r.replace("{executor}", "executor-*"))) if "{executor}" in r else [r]
        ):
            if one and os.path.abspath(one) not in out:
                out.append(os.path.abspath(one))
    return out


def clean_up(application_id: str, state_dir: str | None = None) -> CleanUpReport:
    """Delete ``application_id``'s local stores under :func:`roots`. The app must not run:
    its next run rebuilds them from its checkpoint.

    Examples
    --------
    >>> import tempfile, os
    >>> from kspark_server.localstore import TaskStore
    >>> root = tempfile.mkdtemp()
    >>> _ = TaskStore.open(root, "seen", "inc", 0, application_id="clicks")
    >>> os.makedirs(os.path.join(root, "other"))  # not kspark's
    >>> clean_up("clicks", root).removed == (os.path.join(root, "clicks"),)
    True
    >>> clean_up("other", root).skipped == (os.path.join(root, "other"),)
    True
    >>> sorted(os.listdir(root))
    ['other']
    """
    # here, not at the top: the client imports LMDB only when it cleans up
    from kspark_server.localstore import APP_MARKER, close_under

    check_application_id(application_id)
    removed: list[str] = []
    skipped: list[str] = []
    for root in roots(state_dir):
        folder = os.path.join(root, application_id)
        if not os.path.isdir(folder):
            continue
        if not os.path.isfile(os.path.join(folder, APP_MARKER)):
            skipped.append(folder)
            continue
        close_under(folder)  # the in-process engine opens stores here
        shutil.rmtree(folder)
        removed.append(folder)
    return CleanUpReport(removed=tuple(removed), skipped=tuple(skipped))
