"""The watchdog of an embedded server, run as ``python -m kspark.runtime.watchdog PARENT
GROUP``.

While its parent, the client that started the server, lives, it waits; when the parent is
gone (killed with SIGKILL, so no exit hook ran), it stops the server's process group,
SIGTERM then SIGKILL. It exits by itself once the server is gone. ``os.getppid()``
changes when the parent dies (the watchdog is re-parented), which no reused pid can fake.
"""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["main", "watch"]

#: How often the watchdog looks at its parent and the server, in seconds.
POLL_SECONDS = 0.5

#: How long the server has to stop after SIGTERM before it gets SIGKILL, in seconds.
TERM_GRACE_SECONDS = 20.0


def _alive(group: int) -> bool:
    """Whether any process of ``group`` is left."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def watch(parent: int, group: int, grace: float = TERM_GRACE_SECONDS) -> None:
    """Wait while ``parent`` is this process's parent and ``group`` lives; once the parent
    is gone, stop ``group`` (``grace``: seconds between SIGTERM and SIGKILL)."""
    while os.getppid() == parent:
        if not _alive(group):
            return
        time.sleep(POLL_SECONDS)
    _stop(group, grace)


def _stop(group: int, term_grace: float) -> None:
    """SIGTERM to ``group``, then SIGKILL to what is left after ``term_grace`` seconds."""
    for sig, grace in ((signal.SIGTERM, term_grace), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + grace
        while time.monotonic() < end and _alive(group):
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """The command line: ``PARENT GROUP [GRACE]``, two pids and the seconds between SIGTERM
    and SIGKILL."""
    args = sys.argv[1:] if argv is None else argv
    parent, group = int(args[0]), int(args[1])
    watch(parent, group, float(args[2]) if len(args) > 2 else TERM_GRACE_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
