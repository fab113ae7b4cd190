"""The operator spec is the only thing kspark and kspark_server share: check that every spec
the compiler writes is one the server accepts, and that mismatches are refused clearly."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from datetime import timedelta

import pytest

import kspark_server
from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import SPEC_VERSION, compile_topology
from kspark.compiler import stages as st
from kspark_server.spec import SpecError, check_spec


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


def _all_specs() -> list[dict[str, object]]:
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
    specs = [s.spec for s in out.stages() if isinstance(s, st.Chain | st.Stateful | st.IdStage)]
    return [*specs, out.writer_spec]


def test_versions_agree() -> None:
    assert SPEC_VERSION == kspark_server.SPEC_VERSION


def test_every_compiled_spec_is_accepted_by_the_server() -> None:
    specs = _all_specs()
    assert {s["kind"] for s in specs} == {"chain", "dedup_id", "dedup", "join", "sinks"}
    for spec in specs:
        check_spec(spec)


def test_a_different_version_is_refused_with_a_fix() -> None:
    spec = dict(_all_specs()[0], spec_version=SPEC_VERSION + 1)
    with pytest.raises(SpecError, match="same kspark version"):
        check_spec(spec)


def test_unknown_kinds_and_steps_are_refused() -> None:
    chain = next(s for s in _all_specs() if s["kind"] == "chain")
    with pytest.raises(SpecError, match="kind"):
        check_spec(dict(chain, kind="teleport"))
    with pytest.raises(SpecError, match="step op"):
        check_spec(dict(chain, steps=[{"op": "teleport", "processor": "X"}]))


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
