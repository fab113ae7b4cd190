"""The demo app: ``kspark demo``."""

from __future__ import annotations

from kspark.demo.run import run_demo

__all__ = ["run_demo"]
