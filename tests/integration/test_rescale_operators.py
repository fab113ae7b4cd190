"""Rescale of the table and window operators: foreign-key joins (their subscription,
registration and result stores), ``KTable.group_by`` with ``count`` and ``aggregate``, a
cogrouped aggregation, a time-limited suppression, sliding windows and a stream-global
table join, all in one app rescaled from 1 to 3 partitions and from 3 to 2 between its
micro-batches. Its outputs and its stores' answers are those of the same app that never
rescaled (one task throughout).

The input is laid out so that no answer depends on which keys share a task (stream time
is per task): each batch's timestamps are after the batch before's, records are piped in
time order, a suppressed key's updates span less than the time limit and the next
batch's records let it out, and the sliding windows' store keeps closed windows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kspark import (
    BufferConfig,
    Materialized,
    SlidingWindows,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    Topic,
)
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

MS = timedelta(milliseconds=1)
BATCHES = 3
#: the rescales before batch 1 and batch 2: 1 -> 3 -> 2 partitions
RESCALES = {1: 3, 2: 2}
CUSTOMERS = [f"c{i}" for i in range(6)]
ORDERS = [f"o{i}" for i in range(10)]
USERS = [f"u{i}" for i in range(8)]
CURRENCIES = ["EUR", "USD", "GBP", "ключ", "x" * 600]
FRESH = 16  # suppressed keys per batch, new in each


def _t(topic: str) -> Topic:
    return Topic.jsonl(topic, "/unused")


def fk_join(b: StreamsBuilder) -> Any:
    """Orders (value: a customer) joined by foreign key with customers (value: a region)
    into store and topic ``fk``; the customers table."""
    customers = b.table(_t("customers"), key_type=str, value_type=str)
    orders = b.table(_t("orders"), key_type=str, value_type=str)
    orders.join(
        customers,
        foreign_key_extractor=lambda o: o,
        joiner=lambda o, region: f"{o}@{region}",
        materialized=Materialized.as_("fk"),
        value_type=str,
    ).to_stream().to(_t("fk"))
    return customers


def topology() -> Any:
    b = StreamsBuilder()
    customers = fk_join(b)
    by_region = customers.group_by(lambda k, r: (r, k), key_type=str, value_type=str)
    by_region.count(materialized=Materialized.as_("per-region")).to_stream().to(_t("per-region"))
    by_region.aggregate(
        lambda: "",
        lambda region, k, agg: "".join(sorted(agg + k[1:])),
        lambda region, k, agg: agg.replace(k[1:], "", 1),
        materialized=Materialized.as_("members"),
        value_type=str,
    ).to_stream().to(_t("members"))
    views = b.stream(_t("views"), key_type=str, value_type=int)
    clicks = b.stream(_t("clicks"), key_type=str, value_type=str)
    (
        views.group_by_key()
        .cogroup(lambda user, seconds, total: total + seconds)
        .cogroup(clicks.group_by_key(), lambda user, page, total: total + 1000)
        .aggregate(lambda: 0, materialized=Materialized.as_("stats"), value_type=int)
        .to_stream()
        .to(_t("stats"))
    )
    clicks.group_by_key().windowed_by(
        SlidingWindows.of_time_difference_and_grace(300 * MS, 100 * MS)
    ).count(materialized=Materialized.as_("sliding").with_retention(timedelta(days=1))).to_stream(
        lambda wk, n: f"{wk.key}@{wk.window.start}-{wk.window.end}", key_type=str
    ).to(_t("sliding"))
    prices = b.table(_t("prices"), key_type=str, value_type=str)
    prices.suppress(Suppressed.until_time_limit(500 * MS, BufferConfig.unbounded())).to_stream().to(
        _t("calm")
    )
    rates = b.global_table(
        _t("rates"), key_type=str, value_type=str, materialized=Materialized.as_("rates")
    )
    payments = b.stream(_t("payments"), key_type=str, value_type=str)  # value: a currency
    payments.join(rates, lambda k, cur: cur, lambda cur, r: f"{cur}={r}", value_type=str).to(
        _t("converted")
    )
    payments.left_join(rates, lambda k, cur: cur, lambda cur, r: f"{cur}={r}", value_type=str).to(
        _t("converted-left")
    )
    return b.build()


#: (topic, key, value, timestamp)
Rec = tuple[str, str | None, Any, int]


def batch(n: int) -> list[Rec]:
    """Batch ``n``, in time order: the state written before a rescale decides its answers
    (a foreign key that moves, a customer that changes region, aggregates, windows that
    span batches, suppressed keys that wait, table values the stream looks up)."""
    base = n * 1_000
    recs: list[Rec] = []
    for i, c in enumerate(CUSTOMERS):  # regions move one customer in two each batch
        if n == 0 or i % 2 == n % 2:
            recs.append(("customers", c, f"r{(i + n) % 3}", base + 10 + i))
    if n == 2:
        recs.append(("customers", "c5", None, base + 20))  # a delete
    for i, o in enumerate(ORDERS):  # each batch, a third of the orders change customer
        if n == 0 or i % 3 == n % 3:
            recs.append(("orders", o, CUSTOMERS[(i + n) % len(CUSTOMERS)], base + 30 + i))
    if n == 1:
        recs.append(("orders", "o9", None, base + 45))  # a delete
    for i, cur in enumerate(CURRENCIES):
        if n == 0 or i == n:
            recs.append(("rates", cur, f"{cur}-{n}", base + 50 + i))
    if n == 1:
        recs.append(("rates", "EUR", None, base + 58))  # a tombstone
    for i, u in enumerate(USERS):
        recs.append(("views", u, i + n, base + 100 + i))
        if (i + n) % 2:
            recs.append(("clicks", u, f"/p{n}", base + 150 + 10 * i))
        # a second click 200 ms later: windows that hold both
        if i % 3 == n % 3:
            recs.append(("clicks", u, f"/q{n}", base + 350 + 10 * i))
        recs.append(("payments", u, CURRENCIES[(i + n) % len(CURRENCIES)], base + 400 + i))
    recs.append(("payments", "nokey", "CHF", base + 420))  # no rate: the left join keeps it
    for i in range(FRESH):  # two updates each, 200 ms apart: let out by the next batch
        key = f"p{n}-{i}"
        recs.append(("prices", key, f"{key}:a", base + 500 + i))
        recs.append(("prices", key, f"{key}:b", base + 700 + i))
    if n == 1:
        recs.append(("prices", "p0-0", None, base + 720))  # a tombstone of a key already out
    return sorted(recs, key=lambda r: r[3])


OUT_TOPICS = ("fk", "per-region", "members", "stats", "sliding", "calm", "converted")
TABLE_TOPICS = ("fk", "per-region", "members", "stats")  # a batch's last row per key compared
VALUE_TYPES = {
    "views": int,
    "per-region": int,
    "stats": int,
    "sliding": int,
}


def run(spark: Any, app_id: str, rescales: dict[int, int]) -> dict[str, Any]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    outputs: dict[str, list[Any]] = {t: [] for t in (*OUT_TOPICS, "converted-left")}
    reports = []
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        sources = {
            t: d.create_input_topic(t, key_type=str, value_type=VALUE_TYPES.get(t, str))
            for t in ("customers", "orders", "rates", "views", "clicks", "payments", "prices")
        }
        sinks = {
            t: d.create_output_topic(t, key_type=str, value_type=VALUE_TYPES.get(t, str))
            for t in outputs
        }
        for n in range(BATCHES):
            if n in rescales:
                reports.append(d.rescale(rescales[n]))
            for topic, k, v, ts in batch(n):
                sources[topic].pipe_input(k, v, timestamp=ts)
            d.process()
            for t, sink in sinks.items():
                records = [(r.key, r.value, r.timestamp) for r in sink.read_records()]
                if t in TABLE_TOPICS:
                    last: dict[Any, Any] = {}
                    for k, v, ts in records:
                        last[k] = (v, ts)
                    records = [(k, v, ts) for k, (v, ts) in last.items()]
                outputs[t].append(sorted(records, key=repr))
        stores = {
            "fk": [d.store("fk").get(o) for o in ORDERS],
            "per-region": [d.store("per-region").get(f"r{i}") for i in range(3)],
            "members": [d.store("members").get(f"r{i}") for i in range(3)],
            "stats": [d.store("stats").get(u) for u in USERS],
            "sliding": [d.get_window_store("sliding").fetch(u, 0, 10_000) for u in USERS],
            "rates": [d.store("rates").get(c) for c in CURRENCIES],
        }
    return {"outputs": outputs, "stores": stores, "reports": reports}


@pytest.mark.cluster
def test_table_and_window_operators_keep_their_answers_across_rescales(
    spark: Any, app_id: str
) -> None:
    expected = run(spark, app_id + "-ref", {})
    got = run(spark, app_id, RESCALES)
    for topic, batches in expected["outputs"].items():
        for n, (g, e) in enumerate(zip(got["outputs"][topic], batches, strict=True)):
            assert g == e, f"{topic}, batch {n}"
    assert got["stores"] == expected["stores"]
    # the reference itself says what the semantics say, on a few answers
    out, stores = expected["outputs"], expected["stores"]
    assert stores["fk"][9] is None and stores["fk"][0] == "c0@r2"  # o0: c0, which moved to r2
    assert stores["fk"][1] == "c2@r1"  # o1: c1, then c2 (r2, then r1)
    # c5 deleted; c0 to c4 in r2, r2, r1, r1, r0
    assert stores["per-region"] == [1, 2, 2] and stores["members"] == ["4", "23", "01"]
    assert stores["rates"][:2] == [None, "USD-1"]
    assert stores["stats"][0] == 0 + 1 + 2 + 1000 * 2  # u0: views 0, 1, 2; clicks /p1, /q0
    assert [len(b) for b in out["calm"]] == [0, FRESH, FRESH + 1]  # and p0-0's tombstone
    assert any(v == "CHF=None" for _, v, _ in out["converted-left"][0])
    assert all(len(b) for b in out["sliding"]) and all(len(b) for b in out["converted"])
    # every store moved whole, both times
    first, second = got["reports"]
    assert (first.from_partitions, first.to_partitions, second.to_partitions) == (1, 3, 2)
    for report in got["reports"]:
        assert all(s.entries_before == s.entries_after for s in report.stores)
    moved = {s.store for s in second.stores if s.entries_after}
    fk = {"fk", "fk-fk-subscriptions", "fk-fk-registrations"}
    assert fk | {"per-region", "members", "stats", "sliding", "rates"} <= moved, moved
