"""The test broker lives in the package (the demo uses it too); tests import it from here."""

from __future__ import annotations

from kspark.testing.broker import (
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
