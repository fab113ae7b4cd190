"""The specs of the operators without state: a fused chain of steps, and the two that add
a column for a repartition (a dedup id, a global table's join key).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from kspark_server.contract.parts import Handling, OperatorFields, RecordLimit
from kspark_server.contract.steps import STEPS, Step
from kspark_server.contract.valuetypes import KeyValue, TypeSpec
from kspark_server.contract.version import SPEC_VERSION, Fn, SpecError

__all__ = ["ChainSpec", "DedupIdSpec", "JoinKeySpec"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChainSpec:
    """A fused run of stateless steps (one ``mapInArrow`` pass)."""

    kind: ClassVar[str] = "chain"
    spec_version: int = SPEC_VERSION
    input: KeyValue
    output: KeyValue
    steps: tuple[Step, ...]
    output_schema: str
    handling: Handling = Handling()
    #: the processor a chain without steps converts dynamic keys for (a join): a key that
    #: does not convert is that processor's failure (its processing handler)
    converts_for: str | None = None
    #: the chain feeds a Kafka sink: records over its byte limit go to the production
    #: handler (``kspark_server.recordsize``)
    record_limit: RecordLimit | None = None
    #: the sink a chain without steps converts dynamic records for (a sink topic with
    #: declared types): a record that does not convert is the sink's production failure
    sink: str | None = None

    def __post_init__(self) -> None:
        for step in self.steps:
            if not isinstance(step, STEPS):
                raise SpecError(f"unknown step op {getattr(step, 'op', type(step).__name__)!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupIdSpec(OperatorFields):
    """Adds ``ks_id`` (the dedup id) to each record, for ``deduplicate``'s repartition."""

    kind: ClassVar[str] = "dedup_id"
    input: KeyValue
    id_selector: Fn


@dataclasses.dataclass(frozen=True, kw_only=True)
class JoinKeySpec(OperatorFields):
    """Adds ``ks_gkey`` to each stream record of a global-table join: the table key that
    ``key_selector(key, value)`` gives, as ``table_key`` encodes it, so the record goes to
    the task of that key (None for a record with a null value, which the join drops)."""

    kind: ClassVar[str] = "join_key"
    input: KeyValue
    key_selector: Fn
    table_key: TypeSpec
