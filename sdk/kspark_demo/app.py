"""The demo: payments converted at the exchange rate that held when they happened.

The generated data has what real payment feeds have: retransmitted duplicates, events that
arrive out of order, an exchange-rate table that changes over time, and a few malformed
lines. The topology:

1. reads payments (JSON lines) and drops malformed lines to a dead-letter topic;
2. deduplicates retransmissions by payment id within 5 minutes (KIP-655);
3. re-keys by currency and joins each payment with the rate valid at its timestamp,
   from a versioned table (KIP-889/914);
4. writes converted payments;
5. totals the converted amounts per currency and minute (tumbling windows, with a grace
   period that covers the feed's disorder) and writes each window's updates.

The topology names its topics; :func:`demo_config` binds them to the generated files (or,
with ``--kafka``, to Kafka topics), so the topology is the same on both.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from datetime import timedelta
from typing import Any

from kspark.config import StreamsConfig
from kspark.dsl import Deduplicated, Materialized, Named, StreamsBuilder, TimeWindows
from kspark.errors import DeadLetterQueueDeserializationExceptionHandler
from kspark.plan.nodes import Topic
from kspark.plan.topology import Topology

__all__ = ["Converted", "Payment", "Rate", "build_topology", "demo_config", "generate"]

CURRENCIES = ("USD", "GBP", "JPY", "CHF")
BASE_RATES = {"USD": 0.92, "GBP": 1.17, "JPY": 0.0062, "CHF": 1.04}
#: the feed's disorder: an event arrives at most this much after a later one
MAX_DELAY = timedelta(minutes=2)
#: the totals' windows, and their grace period: the feed's disorder, so no record is late
TOTALS_WINDOW = timedelta(minutes=1)
TOTALS_GRACE = MAX_DELAY


@dataclasses.dataclass(frozen=True)
class Payment:
    payment_id: str
    account: str
    currency: str
    amount: float
    ts: int


@dataclasses.dataclass(frozen=True)
class Rate:
    currency: str
    rate: float
    ts: int


@dataclasses.dataclass(frozen=True)
class Converted:
    payment_id: str
    account: str
    currency: str
    amount: float
    rate: float | None
    rate_ts: int | None
    amount_eur: float | None


def convert(p: Payment, r: Rate | None) -> Converted:
    """The joiner: a payment at the rate valid at its time (None if no rate was known)."""
    if r is None:
        return Converted(p.payment_id, p.account, p.currency, p.amount, None, None, None)
    return Converted(
        p.payment_id, p.account, p.currency, p.amount, r.rate, r.ts, round(p.amount * r.rate, 2)
    )


def payment_id(account: str, p: Payment) -> str:
    return p.payment_id


def currency_of(account: str, p: Payment) -> str:
    return p.currency


def has_rate(currency: str, c: Converted) -> bool:
    return c.amount_eur is not None


def no_total() -> float:
    return 0.0


def add_eur(currency: str, c: Converted, total: float) -> float:
    """The aggregator: the window's total in EUR, to the cent."""
    assert c.amount_eur is not None
    return round(total + c.amount_eur, 2)


def build_topology() -> Topology:
    """The demo topology. It names its topics (payments keyed by account, rates keyed by
    currency, the event time as the record timestamp); :func:`demo_config` binds the names
    to files or to Kafka, so the same topology runs on both."""
    b = StreamsBuilder()
    rates = b.table(
        "rates",
        key_type=str,
        value_type=Rate,
        materialized=Materialized.as_versioned("rates-store", history_retention=timedelta(days=1)),
    )
    payments = b.stream("payments", key_type=str, value_type=Payment)
    converted = (
        payments.deduplicate_by_key_value(
            payment_id, timedelta(minutes=5), Deduplicated.as_("dedup-retransmits")
        )
        .select_key(currency_of, Named.as_("key-by-currency"), key_type=str)
        .left_join(rates, convert, value_type=Converted)
    )
    converted.to("converted")
    (
        converted.filter(has_rate, Named.as_("with-rate"))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(TOTALS_WINDOW, TOTALS_GRACE))
        .aggregate(
            no_total,
            add_eur,
            Named.as_("eur-per-minute"),
            Materialized.as_("eur-per-minute-store"),
            value_type=float,
        )
        .to_stream()
        .to("totals")
    )
    return b.build()


def demo_config(data_dir: str, num_partitions: int = 4, kafka: str | None = None) -> StreamsConfig:
    """The demo's settings, with its bindings: with ``kafka`` (bootstrap servers), every
    topic is the Kafka topic of its name; otherwise the generated feeds in ``data_dir``
    (one JSON document per line, key and timestamp among its fields) and, through
    ``data_dir``, ``converted`` and ``totals`` as JSON lines in ``<data_dir>/<name>``."""
    config = StreamsConfig(
        application_id="kspark-demo",
        checkpoint_dir=os.path.join(data_dir, "checkpoint"),
        num_partitions=num_partitions,
        deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
    )
    if kafka is not None:
        dlq = Topic.kafka("dlq", bootstrap_servers=kafka)
        return config.with_(dead_letter_queue_topic=dlq, bootstrap_servers=kafka)
    feeds = {
        name: Topic.jsonl(
            name,
            os.path.join(data_dir, name),
            layout="value",
            key_field=key_field,
            timestamp_field="ts",
        )
        for name, key_field in (("rates", "currency"), ("payments", "account"))
    }
    dlq = Topic.parquet("dlq", os.path.join(data_dir, "out", "dlq"))
    return config.with_(dead_letter_queue_topic=dlq, topics=feeds, data_dir=data_dir)


def generate(data_dir: str, n_payments: int = 2000, seed: int = 7, part: int = 0) -> dict[str, Any]:
    """Write payment and rate files to ``data_dir``; returns what was generated."""
    rng = random.Random(seed + part)
    start = 1_767_225_600_000 + part * 3_600_000  # 2026-01-01, one hour per part
    os.makedirs(os.path.join(data_dir, "payments"), exist_ok=True)
    os.makedirs(os.path.join(data_dir, "rates"), exist_ok=True)
    rates = []
    for c in CURRENCIES:
        level = BASE_RATES[c]
        # a new rate every 10 minutes, from before the first payment
        for minute in range(-10, 60, 10):
            level *= 1 + rng.uniform(-0.03, 0.03)
            rates.append(Rate(c, round(level, 6), start + minute * 60_000))
    payments: list[Payment] = []
    for i in range(n_payments):
        ts = start + int(i * 3_600_000 / n_payments)
        payments.append(
            Payment(
                f"p{part}-{i:06d}",
                f"acct-{rng.randrange(200):03d}",
                rng.choice(CURRENCIES),
                round(rng.uniform(5, 2000), 2),
                ts,
            )
        )
    lines: list[str] = []
    duplicates = 0
    for p in payments:
        # out of order: some events arrive up to MAX_DELAY late
        delay = int(MAX_DELAY.total_seconds() * 1000)
        shown = dataclasses.replace(p, ts=p.ts - rng.randrange(delay)) if rng.random() < 0.1 else p
        lines.append(json.dumps(dataclasses.asdict(shown)))
        if rng.random() < 0.08:  # a retransmission seconds later
            again = dataclasses.replace(shown, ts=shown.ts + rng.randrange(30_000))
            lines.append(json.dumps(dataclasses.asdict(again)))
            duplicates += 1
    malformed = [
        '{"payment_id": "bad-1", "amount": "twelve"',
        "not json at all",
        '{"payment_id": 5, "amount": ',
    ]
    for j, bad in enumerate(malformed):
        lines.insert((j + 1) * len(lines) // 4, bad)
    with open(os.path.join(data_dir, "payments", f"payments-{part:03d}.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    rates.sort(key=lambda r: r.ts)
    with open(os.path.join(data_dir, "rates", f"rates-{part:03d}.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(dataclasses.asdict(r)) for r in rates) + "\n")
    return {
        "payments": len(payments),
        "duplicates": duplicates,
        "malformed": len(malformed),
        "rates": rates,
        "lines": len(lines),
    }
