"""Testing tools: the topology test driver."""

from __future__ import annotations

from kspark.testing.driver import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"]
