"""The plan IR: immutable topology nodes. This package never imports pyspark."""

from __future__ import annotations

from kspark.plan.nodes import *  # noqa: F403
from kspark.plan.nodes import __all__ as _nodes_all
from kspark.plan.topology import Topology
from kspark.plan.types import TypeDesc, describe_type

__all__ = [*_nodes_all, "Topology", "TypeDesc", "describe_type"]
