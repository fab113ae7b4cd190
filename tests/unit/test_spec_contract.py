"""The operator specs are the only thing kspark and kspark_server share: check that every
spec the compiler writes is one the server accepts, and that mismatches are refused clearly."""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
from datetime import timedelta

import pytest

import kspark_server
from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark_server import envelope, spec
from kspark_server.spec import SPEC_VERSION, OperatorSpec, SpecError, check_spec


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


def _all_specs() -> list[OperatorSpec]:
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/tmp/r"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_versioned("rates", timedelta(hours=1)),
    )
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    d = s.filter(lambda k, v: True).deduplicate(lambda k, v: v.id, timedelta(seconds=1))
    d.join(rates, lambda p, r: p.amount * r, value_type=float).to(Topic.parquet("o", "/tmp/o"))
    out = compile_topology(b.build(), StreamsConfig(application_id="c"))
    specs: list[OperatorSpec] = [
        s.spec for s in out.stages() if isinstance(s, st.Chain | st.Stateful | st.IdStage)
    ]
    return [*specs, out.writer_spec]


def test_one_version_for_both_sides() -> None:
    assert kspark_server.SPEC_VERSION == SPEC_VERSION
    assert {s.spec_version for s in _all_specs()} == {SPEC_VERSION}


def test_every_compiled_spec_is_accepted_by_the_server() -> None:
    specs = _all_specs()
    assert {s.kind for s in specs} == {"chain", "dedup_id", "dedup", "join", "sinks"}
    for s in specs:
        assert check_spec(s) is s


def test_a_different_version_is_refused_with_a_fix() -> None:
    other = dataclasses.replace(_all_specs()[0], spec_version=SPEC_VERSION + 1)
    with pytest.raises(SpecError, match="same kspark version"):
        check_spec(other)


def test_unknown_kinds_and_steps_are_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Teleport:
        kind = "teleport"
        spec_version = SPEC_VERSION

    with pytest.raises(SpecError, match="kind 'teleport'"):
        check_spec(Teleport())  # type: ignore[type-var]
    chain = next(s for s in _all_specs() if isinstance(s, spec.ChainSpec))
    with pytest.raises(SpecError, match="step op"):
        dataclasses.replace(chain, steps=(Teleport(),))  # type: ignore[arg-type]


def test_malformed_type_specs_are_refused_when_built() -> None:
    with pytest.raises(SpecError, match="list element"):
        spec.ListSpec(element={"t": "prim", "spark": "long"})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"Payment\.amount"):
        spec.RecordSpec(cls=Payment, fields=(("amount", "double"),))  # type: ignore[arg-type]


def test_side_rows_and_the_envelope_have_one_definition() -> None:
    side = [f["name"] for f in envelope.SIDE["fields"]]
    assert side[0] == "kind" and len(side) == len(set(side))
    names = [name for name, _ in envelope.ENVELOPE]
    assert names[:2] == ["key", "value"] and list(envelope.TAIL) == names[2:]
    assert set(envelope.STORED) <= set(names)
    # the compiler's schemas are built from it
    chain = next(s for s in _all_specs() if isinstance(s, spec.ChainSpec))
    assert [f["name"] for f in json.loads(chain.output_schema)["fields"]] == names


def test_kspark_server_never_imports_kspark() -> None:
    root = pathlib.Path(kspark_server.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "kspark" or n.startswith("kspark.") for n in names), path


def test_dead_letter_headers_have_one_definition() -> None:
    # KIP-1034's names: the sinks write them and the Kafka source recognises dead letters
    # by the same definition
    from kspark_server import kafka_sink, sinks

    assert all(h.startswith("__streams.errors.") for h in envelope.DLQ_HEADERS.values())
    assert kafka_sink.DLQ_EXCEPTION_HEADER == envelope.DLQ_HEADERS["exception_class"]
    assert sinks.DLQ_HEADERS is envelope.DLQ_HEADERS
