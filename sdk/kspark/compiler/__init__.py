"""The compiler: plan nodes to stages (:mod:`.compiler`) and stages to Spark Connect
DataFrames (:mod:`.lowering`)."""

from __future__ import annotations

from kspark.compiler.compiler import compile_topology

__all__ = ["compile_topology"]
