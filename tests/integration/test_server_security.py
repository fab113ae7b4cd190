"""The embedded server admits only clients with its token, on loopback only (issue 17)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from kspark.runtime import server

pytestmark = pytest.mark.spark


@pytest.fixture
def embedded(spark_server: Any) -> Any:
    if spark_server is None:
        pytest.skip("the tests run against a remote server (--spark-remote)")
    return spark_server


def test_a_client_without_the_token_is_refused(embedded: Any) -> None:
    assert server._answers_as_our_server(embedded.port, embedded.token, timeout=10.0)
    assert not server._answers_as_our_server(embedded.port, "not-the-token", timeout=10.0)
    assert not server._answers_as_our_server(embedded.port, "", timeout=10.0)


def _outward_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere
        except OSError:
            return "127.0.0.1"
        return str(s.getsockname()[0])


def test_the_server_listens_on_loopback_only(embedded: Any) -> None:
    address = _outward_address()
    if address.startswith("127."):
        pytest.skip("this machine has no address besides loopback")
    with socket.socket() as s:
        s.settimeout(5.0)
        assert s.connect_ex((address, embedded.port)) != 0
