"""An example with no types at all: page views, without health checks or retransmissions.

    kspark run examples.clicks:topology --config examples/clicks.toml

The topology names its topics and declares no types: keys and values are whatever JSON the
records hold (here a user id and ``{"id": ..., "page": ...}``). ``examples/clicks.toml``
binds the names through ``data_dir``: JSON lines in ``./data/clicks`` and ``./data/views``,
one ``{"key": ..., "value": ..., "timestamp": ...}`` per line.
"""

from __future__ import annotations

from datetime import timedelta

from kspark import StreamsBuilder, Topology


def topology() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("clicks")
        .filter(lambda user, click: click["page"] != "/health")
        .deduplicate_by_key_value(lambda user, click: click["id"], timedelta(minutes=1))
        .map_values(lambda user, click: {"user": user, "page": click["page"]})
        .to("views")
    )
    return b.build()
