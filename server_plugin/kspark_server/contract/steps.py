"""The steps of a chain: a tagged union (:data:`Step`) whose class is the tag.

A chain (:class:`~kspark_server.contract.stateless.ChainSpec`) runs them in order in one
pass (:mod:`kspark_server.chain`); each names its processor and carries the user's
function.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, get_args

from kspark_server.contract.valuetypes import ArrowValues
from kspark_server.contract.version import Fn, SpecError

__all__ = [
    "STEPS",
    "BranchStep",
    "FilterStep",
    "FlatMapStep",
    "FlatMapValuesStep",
    "ForeachStep",
    "MapStep",
    "MapValuesStep",
    "PeekStep",
    "SelectKeyStep",
    "Step",
    "TableFilterStep",
    "TableMapValuesStep",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FnStep:
    """A step of processor ``processor`` that calls the user's ``fn``; ``op`` is its tag."""

    op: ClassVar[str]
    processor: str
    fn: Fn


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterStep(_FnStep):
    """``fn(key, value)``, or with ``vectorized`` ``fn(values)`` over a whole column."""

    op = "filter"
    negate: bool
    vectorized: ArrowValues | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapStep(_FnStep):
    op = "map"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapValuesStep(_FnStep):
    """``fn(value)`` or ``fn(key, value)``, or with ``vectorized`` ``fn(values)`` over a
    whole column."""

    op = "map_values"
    with_key: bool
    vectorized: ArrowValues | None = None

    def __post_init__(self) -> None:
        if self.vectorized is not None and self.with_key:
            raise SpecError(f"{self.processor}: a vectorized mapper takes the values only")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatMapStep(_FnStep):
    op = "flat_map"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatMapValuesStep(_FnStep):
    op = "flat_map_values"
    with_key: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectKeyStep(_FnStep):
    op = "select_key"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeekStep(_FnStep):
    op = "peek"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForeachStep(_FnStep):
    """``fn(key, value)`` for each record, which then ends there (``foreach``, ``print``)."""

    op = "foreach"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BranchStep:
    """Keeps the records whose first true predicate is ``index`` (or none, for the default
    branch, whose ``index`` is ``len(predicates)``)."""

    op: ClassVar[str] = "branch"
    processor: str
    predicates: tuple[Fn, ...]
    index: int
    #: the split's processor (``KSTREAM-BRANCH-...``), which a failing predicate names:
    #: every branch evaluates the same predicates, and the failure is handled once
    split: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableFilterStep(_FnStep):
    op = "table_filter"
    negate: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableMapValuesStep(_FnStep):
    op = "table_map_values"
    with_key: bool


Step = (
    FilterStep
    | MapStep
    | MapValuesStep
    | FlatMapStep
    | FlatMapValuesStep
    | SelectKeyStep
    | PeekStep
    | ForeachStep
    | BranchStep
    | TableFilterStep
    | TableMapValuesStep
)

STEPS: tuple[type, ...] = get_args(Step)
