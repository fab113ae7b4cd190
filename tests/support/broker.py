"""The test broker lives next to the demo (``kspark demo --kafka`` uses it too); tests import
it from here."""

from __future__ import annotations

from kspark_demo.broker import (
    ONE_RECORD_PER_BATCH,
    Broker,
    BrokerUnavailable,
    consume_all,
    create_topic,
    delete_topic,
    find_tansu,
    produce,
    running_broker,
    start_broker,
)

__all__ = [
    "ONE_RECORD_PER_BATCH",
    "Broker",
    "BrokerUnavailable",
    "consume_all",
    "create_topic",
    "delete_topic",
    "find_tansu",
    "produce",
    "running_broker",
    "start_broker",
]
