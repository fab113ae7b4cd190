"""One ``$KSPARK_HOME`` for everything kspark keeps on the client (no Spark)."""

from __future__ import annotations

import os
import pathlib

import pytest

from kspark._paths import kspark_home
from kspark.runtime import failures, handles, standalone
from kspark.runtime.server import EmbeddedServer


def test_everything_kspark_keeps_is_under_one_home(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path))
    assert kspark_home() == str(tmp_path)
    assert handles.handles_dir() == os.path.join(tmp_path, "apps")
    assert standalone.state_dir() == os.path.join(tmp_path, "server")
    # the local stores outlive a server that kspark starts: a restart reuses them
    assert EmbeddedServer().local_state_dir == os.path.join(tmp_path, "local-state")
    assert EmbeddedServer(home=str(tmp_path / "h")).local_state_dir == str(
        tmp_path / "h" / "local-state"
    )
    env = standalone._script_env(str(tmp_path / "server"), "/spark", "python3", "t")
    assert env["KSPARK_LOCAL_STATE_DIR"] == os.path.join(tmp_path, "local-state")
    log = failures.write_log(RuntimeError("boom"), "app")
    assert log is not None and pathlib.Path(log).parent == tmp_path / "logs"


def test_the_default_home_is_dot_kspark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSPARK_HOME", raising=False)
    assert kspark_home("apps") == os.path.join(os.path.expanduser("~"), ".kspark", "apps")
