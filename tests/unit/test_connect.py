"""``kspark.connect()`` without a URL: ``KSPARK_REMOTE`` or the embedded server."""

from __future__ import annotations

from typing import Any

import pytest

from kspark.errors import ServerError
from kspark.runtime import server


class _Session(str):
    """A fake session: a str that, like a real session, can be weakly referenced (kspark
    keeps the sessions it creates in a weak dictionary)."""


class _Builder:
    """Records the URL instead of connecting."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def remote(self, url: str) -> _Builder:
        self.urls.append(url)
        return self

    def create(self) -> str:
        return _Session(f"session({self.urls[-1]})")


@pytest.fixture
def builder(monkeypatch: pytest.MonkeyPatch) -> _Builder:
    from pyspark.sql import SparkSession

    b = _Builder()
    monkeypatch.setattr(SparkSession, "builder", b)

    def no_embedded() -> Any:
        raise AssertionError("the embedded server must not start")

    monkeypatch.setattr(server, "embedded_server", no_embedded)
    return b


def test_kspark_remote_is_used_when_no_url_is_given(
    monkeypatch: pytest.MonkeyPatch, builder: _Builder
) -> None:
    url = "sc://localhost:15002/;token=abc"
    monkeypatch.setenv("KSPARK_REMOTE", url)
    assert server.connect() == f"session({url})"
    assert builder.urls == [url]


def test_an_explicit_url_wins_over_kspark_remote(
    monkeypatch: pytest.MonkeyPatch, builder: _Builder
) -> None:
    monkeypatch.setenv("KSPARK_REMOTE", "sc://from-env:1")
    assert server.connect("sc://given:2") == "session(sc://given:2)"


def test_a_bad_kspark_remote_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch, builder: _Builder
) -> None:
    monkeypatch.setenv("KSPARK_REMOTE", "localhost:15002")
    with pytest.raises(ServerError, match="KSPARK_REMOTE must be a Spark Connect URL"):
        server.connect()
    assert builder.urls == []


def test_empty_kspark_remote_means_the_embedded_server(
    monkeypatch: pytest.MonkeyPatch, builder: _Builder
) -> None:
    monkeypatch.setenv("KSPARK_REMOTE", " ")
    with pytest.raises(AssertionError, match="embedded server must not start"):
        server.connect()


def test_embedded_server_url_carries_port_and_token() -> None:
    s = server.EmbeddedServer()
    s.port = 15002
    assert s.url == f"sc://localhost:15002/;token={s.token}"
