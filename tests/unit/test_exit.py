"""A process whose Spark Connect server is gone exits at once (no Spark: the "server" is a
port with nothing listening, which is what a killed server leaves)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kspark
from kspark.runtime import server

REPO = Path(kspark.__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_client_whose_server_is_gone_exits_within_seconds(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import kspark

            spark = kspark.connect("sc://127.0.0.1:{_free_port()}")
            print("connected", flush=True)
            """
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), str(REPO / "server_plugin")]),
    }
    env.pop(server.REMOTE_ENV, None)
    try:
        # without kspark's exit hook, pyspark's own retries the cache cleanup for minutes
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the client did not exit within 30 s: {e.stdout!r} {e.stderr!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "connected"


class _Client:
    def __init__(self) -> None:
        self.is_closed = False
        self.policies: list[Any] | None = None

    def set_retry_policies(self, policies: list[Any]) -> None:
        self.policies = list(policies)

    def close(self) -> None:
        self.is_closed = True


class _Session:
    def __init__(self) -> None:
        self.client = _Client()


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_only_sessions_whose_server_is_gone_are_dropped(
    monkeypatch: pytest.MonkeyPatch, listening: int
) -> None:
    monkeypatch.setattr(server, "_sessions", type(server._sessions)())
    alive, gone, closed = _Session(), _Session(), _Session()
    closed.client.is_closed = True
    server._track(alive, f"sc://127.0.0.1:{listening}/;token=t")
    server._track(gone, f"sc://127.0.0.1:{_free_port()}")
    server._track(closed, f"sc://127.0.0.1:{_free_port()}")

    assert server._drop_orphaned_sessions(timeout=5) == [gone]
    assert gone.client.is_closed and gone.client.policies == []
    assert not alive.client.is_closed and alive.client.policies is None


def test_the_address_of_a_url() -> None:
    assert server._server_address("sc://Host.example:1234/;token=x") == ("host.example", 1234)
    assert server._server_address("sc://host") == ("host", 15002)
