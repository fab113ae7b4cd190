"""Running topologies: sessions, code shipping and the app object."""

from __future__ import annotations

from kspark.runtime.app import RunReport, State, StreamsApp
from kspark.runtime.metrics import Metrics
from kspark.runtime.server import EmbeddedServer, connect

__all__ = ["EmbeddedServer", "Metrics", "RunReport", "State", "StreamsApp", "connect"]
