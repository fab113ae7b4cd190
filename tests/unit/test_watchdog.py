"""The embedded server's watchdog, as a module (no Spark): it stops the server's process
group once its parent is gone, and leaves by itself once the server is gone."""

from __future__ import annotations

import os
import subprocess
import sys

from kspark.runtime import watchdog


def _group() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_it_stops_the_group_once_its_parent_is_gone() -> None:
    server = _group()
    try:
        # a parent pid that is not this process's parent: as after the client died
        # a short grace: the stopped child stays this test's zombie, which SIGKILL cannot end
        watchdog.watch(parent=-1, group=server.pid, grace=0.5)
        assert server.wait(10) == -15  # SIGTERM
    finally:
        server.kill()


def test_it_leaves_once_the_server_is_gone() -> None:
    server = _group()
    server.kill()
    server.wait(10)
    watchdog.watch(parent=os.getppid(), group=server.pid)  # returns: nothing to watch


def test_it_runs_as_a_module() -> None:
    server = _group()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kspark.runtime.watchdog", "-1", str(server.pid), "0.5"],
            timeout=60,
            check=False,
        )
        assert done.returncode == 0
        assert server.wait(10) == -15
    finally:
        server.kill()
