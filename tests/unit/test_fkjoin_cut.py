"""A foreign-key join: its three stages become plan nodes (kspark.plan.fkjoin) that the
sub-topology cut sends through internal topics, alone or with other stateful operators.
Plan only, no Spark."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology, subtopologies
from kspark.compiler import stages as st
from kspark.compiler.lowering.build import grouped_stages
from kspark.errors import CompilationError
from kspark.plan import fkjoin
from kspark.plan import nodes as n
from kspark.plan.types import describe_type
from kspark.runtime.stores.files import store_keys
from kspark_server.placement import task_keys


def _joiner(o: str, c: str | None) -> str:
    return f"{o}+{c}"


def _fk(o: str) -> str | None:
    return o.split("/")[0] or None


def _config(tmp_path: Path, **more: Any) -> StreamsConfig:
    return StreamsConfig(application_id="app", data_dir=str(tmp_path), **more)


def _cut(b: StreamsBuilder, config: StreamsConfig) -> tuple[Any, Any, Any, Any]:
    topology = bind_topology(b.build(), config)
    plain = compile_topology(topology, config)
    names = {s.spec.processor for s in plain.stages() if isinstance(s, st.Stateful)}
    cut = subtopologies.cut(topology, names, config.checkpoint_dir, "app")
    return topology, plain, cut, compile_topology(cut, config)


def _lone(b: StreamsBuilder) -> None:
    orders = b.table("orders", key_type=str, value_type=str)
    customers = b.table("customers", key_type=str, value_type=str)
    orders.left_join(
        customers,
        foreign_key_extractor=_fk,
        joiner=_joiner,
        materialized=Materialized.as_("enriched"),
        value_type=str,
    ).to_stream().to("out")


def _specs(output: Any) -> dict[str, Any]:
    return {s.spec.processor: s.spec for s in output.stages() if isinstance(s, st.Stateful)}


def test_a_lone_join_runs_its_stages_a_topic_apart(tmp_path: Path) -> None:
    b = StreamsBuilder()
    _lone(b)
    topology, plain, cut, output = _cut(b, _config(tmp_path))
    assert cut is not topology
    join = next(x for x in topology.nodes() if isinstance(x, n.ForeignKeyJoin))
    # no stage reads another in the same micro-batch
    grouped = grouped_stages(output)
    assert [g.spec.kind for g in grouped] == ["fksubscribe", "fkmatch", "fkresolve"]
    assert [g.spec.store for g in grouped] == [
        "enriched-fk-subscriptions",
        "enriched-fk-registrations",
        "enriched",
    ]
    topics = {t.name for t in subtopologies.internal_topics(cut)}
    assert topics == {
        f"app-{join.name}-SUBSCRIPTION-internal",
        f"app-{join.name}-REGISTRATION-internal",
        f"app-{join.name}-internal",
    }
    # the subscriptions and the responses cross as MessagePack bytes, keyed by the
    # foreign key and by the left key
    reads = {s.topic.name: s for s in output.stages() if isinstance(s, st.Read)}
    sub = reads[f"app-{join.name}-SUBSCRIPTION-internal"]
    assert sub.value_type == describe_type(bytes) and sub.key_type == describe_type(str)
    # the stages run as they do in one pass: the same specs but for their sub-topology
    before, after = _specs(plain), _specs(output)
    assert before.keys() == after.keys()
    for name, spec in before.items():
        assert dataclasses.replace(spec, handling=after[name].handling) == after[name], name


def test_a_join_of_a_counted_table_and_a_join_of_its_result(tmp_path: Path) -> None:
    """With other stateful operators: the left table is a count, and the result joins
    again on a foreign key (as Kafka's multi-join test chains two)."""
    b = StreamsBuilder()
    counts = (
        b.stream("clicks", key_type=str, value_type=str)
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
    )
    tiers = b.table("tiers", key_type=str, value_type=str)
    regions = b.table("regions", key_type=str, value_type=str)
    tiered = counts.join(
        tiers,
        foreign_key_extractor=lambda c: "big" if c > 2 else "small",
        joiner=lambda c, t: f"{c}:{t}",
        materialized=Materialized.as_("tiered"),
        value_type=str,
    )
    tiered.left_join(
        regions,
        foreign_key_extractor=lambda v: v.split(":")[1],
        joiner=_joiner,
        materialized=Materialized.as_("placed"),
        value_type=str,
    ).to_stream().to("out")
    config = _config(tmp_path, num_partitions=2)
    _, _, cut, output = _cut(b, config)
    grouped = grouped_stages(output)
    assert len(grouped) == 7
    assert len(subtopologies.internal_topics(cut)) == 7
    # the stores' readers find each store's operator among the seven
    app = StreamsApp(b.build(), config, session=object())
    compiled = app.compiled()
    for store in ("counts", "tiered", "placed"):
        i = next(i for i, g in enumerate(grouped) if g.spec.store == store)
        assert store_keys(compiled, store) == task_keys(2, i)


def test_the_expansion_keeps_every_other_node(tmp_path: Path) -> None:
    b = StreamsBuilder()
    _lone(b)
    topology = b.build()
    expanded = fkjoin.expand(topology)
    assert fkjoin.expand(expanded) is expanded
    kinds = [type(x).__name__ for x in expanded.nodes()]
    assert "ForeignKeyJoin" not in kinds
    assert {x.name for x in expanded.nodes()} >= {
        x.name for x in topology.nodes() if not isinstance(x, n.ForeignKeyJoin)
    }
    join = next(x for x in topology.nodes() if isinstance(x, n.ForeignKeyJoin))
    assert expanded.stores() == {
        "enriched": join.name,
        "enriched-fk-subscriptions": f"{join.name}-SUBSCRIPTION",
        "enriched-fk-registrations": f"{join.name}-REGISTRATION",
    }


def test_paced_runs_are_refused_by_name(tmp_path: Path) -> None:
    b = StreamsBuilder()
    _lone(b)
    with pytest.raises(CompilationError, match=r"SUBSCRIPTION: .*max_files_per_trigger"):
        _cut(b, _config(tmp_path, max_files_per_trigger=1))


def test_a_paced_topic_is_refused_by_name(tmp_path: Path) -> None:
    from kspark import Topic

    b = StreamsBuilder()
    orders = b.table(
        Topic.kafka("orders", "localhost:9092", maxOffsetsPerTrigger="100"),
        key_type=str,
        value_type=str,
    )
    customers = b.table("customers", key_type=str, value_type=str)
    orders.join(customers, _fk, _joiner, value_type=str).to_stream().to("out")
    with pytest.raises(CompilationError, match="option maxOffsetsPerTrigger of topic orders"):
        _cut(b, _config(tmp_path))
