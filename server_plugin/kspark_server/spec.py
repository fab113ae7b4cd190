"""The operator specs: the typed contract between kspark's compiler and the operators.

The compiler builds one spec per operator (:data:`OperatorSpec`); the spec travels to the
workers inside the pickled operator function, and the operator reads its fields. Specs are
frozen and check themselves when built, so an operator never meets a malformed one.

- type specs (:data:`TypeSpec`) say how a key or value column becomes a Python object
  and back (:mod:`kspark_server.codec`);
- a chain's steps are a tagged union (:data:`Step`): the class is the tag;
- every operator spec carries the :data:`SPEC_VERSION` it was written with, and
  :func:`check_spec` refuses another version.

They are standard-library dataclasses, not attrs classes: this package runs in workers
that need nothing installed besides pyarrow and pandas (docs/deployment.md).

This module is the contract's one name: every spec is imported from it. The specs live
in the modules of :mod:`kspark_server.contract`, each one part of the contract, from the
bottom up:
:mod:`~kspark_server.contract.version` (the version and :class:`SpecError`),
:mod:`~kspark_server.contract.valuetypes` (type specs), :mod:`~kspark_server.contract.parts`
(what many specs share), :mod:`~kspark_server.contract.steps` (a chain's steps),
:mod:`~kspark_server.contract.stateless`, :mod:`~kspark_server.contract.stateful` and
:mod:`~kspark_server.contract.sinks` (the operators), and :mod:`~kspark_server.contract.check`
(every operator kind, and :func:`check_spec`).

Examples
--------
>>> import dataclasses
>>> t = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
>>> step = MapValuesStep(processor="KSTREAM-MAPVALUES-0000000001", fn=abs, with_key=False)
>>> spec = ChainSpec(input=t, output=t, steps=(step,), output_schema="{}")
>>> check_spec(spec).kind
'chain'
>>> check_spec(dataclasses.replace(spec, spec_version=0))
Traceback (most recent call last):
...
kspark_server.contract.version.SpecError: operator spec version 0 is not supported by this kspark_server (supports 13); use the same kspark version on client and server
"""

from __future__ import annotations

from kspark_server.contract.check import OperatorSpec, check_spec
from kspark_server.contract.parts import (
    BASE_CHUNK_BYTES,
    Handling,
    Packed,
    RecordLimit,
    StateOptions,
    TopicRef,
)
from kspark_server.contract.sinks import (
    DynamicSinkSpec,
    SinkSpec,
    SinksSpec,
    TopicNameSpec,
    TopicRule,
)
from kspark_server.contract.stateful import (
    AggregateSpec,
    Change,
    CogroupInput,
    DedupSpec,
    FkMatchSpec,
    FkResolveSpec,
    FkSubscribeSpec,
    GlobalStoreSpec,
    JoinSpec,
    ProcessorSpec,
    StatefulSpec,
    StoreSpec,
    SuppressSpec,
    TableGroupBySpec,
    TableJoinSpec,
    WindowJoinSpec,
)
from kspark_server.contract.stateless import ChainSpec, DedupIdSpec, JoinKeySpec
from kspark_server.contract.steps import (
    BranchStep,
    FilterStep,
    FlatMapStep,
    FlatMapValuesStep,
    ForeachStep,
    MapStep,
    MapValuesStep,
    PeekStep,
    SelectKeyStep,
    Step,
    TableFilterStep,
    TableMapValuesStep,
)
from kspark_server.contract.valuetypes import (
    ArrowValues,
    JsonSpec,
    KeyValue,
    ListSpec,
    MapSpec,
    PrimSpec,
    RecordSpec,
    TypeSpec,
)
from kspark_server.contract.version import SPEC_VERSION, Fn, SpecError

__all__ = [
    "BASE_CHUNK_BYTES",
    "SPEC_VERSION",
    "AggregateSpec",
    "ArrowValues",
    "BranchStep",
    "ChainSpec",
    "Change",
    "CogroupInput",
    "DedupIdSpec",
    "DedupSpec",
    "DynamicSinkSpec",
    "FilterStep",
    "FkMatchSpec",
    "FkResolveSpec",
    "FkSubscribeSpec",
    "FlatMapStep",
    "FlatMapValuesStep",
    "Fn",
    "ForeachStep",
    "GlobalStoreSpec",
    "Handling",
    "JoinKeySpec",
    "JoinSpec",
    "JsonSpec",
    "KeyValue",
    "ListSpec",
    "MapSpec",
    "MapStep",
    "MapValuesStep",
    "OperatorSpec",
    "Packed",
    "PeekStep",
    "PrimSpec",
    "ProcessorSpec",
    "RecordLimit",
    "RecordSpec",
    "SelectKeyStep",
    "SinkSpec",
    "SinksSpec",
    "SpecError",
    "StateOptions",
    "StatefulSpec",
    "Step",
    "StoreSpec",
    "SuppressSpec",
    "TableFilterStep",
    "TableGroupBySpec",
    "TableJoinSpec",
    "TableMapValuesStep",
    "TopicNameSpec",
    "TopicRef",
    "TopicRule",
    "TypeSpec",
    "WindowJoinSpec",
    "check_spec",
]
