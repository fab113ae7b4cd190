"""The Kafka data source's options, shared by its source (:mod:`kspark_server.kafka`) and
sink (:mod:`kspark_server.kafka_sink`). Standard library only: shipped to the workers by
value with them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

__all__: list[str] = []

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_conf(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options without the prefix; requires the bootstrap servers."""
    conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not conf.get("bootstrap.servers", "").strip():
        raise ValueError(
            "the kspark_kafka data source needs the option 'kafka.bootstrap.servers' "
            "(for example 'localhost:9092')"
        )
    return conf


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise ValueError(f"option {name!r} must be 'true' or 'false', not {raw!r}")


def int_option(opts: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"option {name!r} must be positive, not {value}")
    return value
