"""An example app: payments deduplicated and converted at the rate valid at payment time.

    kspark describe examples.payments:topology
    kspark run examples.payments:topology --app-id payments

It reads ``./data/payments`` and ``./data/rates`` (JSON lines, as ``kspark demo`` writes
them) and writes ``./data/out/converted``.
"""

from __future__ import annotations

import os

from kspark import Topology
from kspark_demo.app import build_topology


def topology() -> Topology:
    return build_topology(os.environ.get("KSPARK_EXAMPLE_DATA", os.path.abspath("data")))
