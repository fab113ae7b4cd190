"""Testing tools: the topology test driver."""

from __future__ import annotations

from kspark.testing.driver import (
    DEFAULT_ENGINE,
    TestInputTopic,
    TestOutputTopic,
    TestRecord,
    TopologyTestDriver,
)

__all__ = [
    "DEFAULT_ENGINE",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopologyTestDriver",
]
