"""An example app: payments deduplicated and converted at the rate valid at payment time.

    kspark describe examples.payments:topology
    kspark run examples.payments:topology --config examples/payments.toml

The topology names its topics; ``examples/payments.toml`` binds them: the feeds
``./data/payments`` and ``./data/rates`` (JSON lines, as ``kspark demo`` writes them) and,
through ``data_dir``, ``./data/converted``. With ``bootstrap_servers = "host:9092"``
instead, the same topology reads and writes Kafka topics.
"""

from __future__ import annotations

from kspark import Topology
from kspark_demo.app import build_topology


def topology() -> Topology:
    return build_topology()
