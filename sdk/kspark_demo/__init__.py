"""The demo app of ``kspark demo`` and ``./run demo``.

It is user code, apart from the library: kspark ships it to the server like any app's
modules. ``kspark_demo.broker`` starts the local Kafka-protocol broker of ``--kafka``
(the tests use it too)."""

from __future__ import annotations

from kspark_demo.run import run_demo

__all__ = ["run_demo"]
