"""The operator spec shared with the client, and its validation.

A spec is a plain dict. Its ``spec_version`` must equal :data:`SPEC_VERSION`; its ``kind``
names the operator. Type specs inside it are dicts tagged by ``t``:

- ``{"t": "prim", "spark": "long"}``
- ``{"t": "list", "element": <type spec>}``
- ``{"t": "map", "key": <type spec>, "value": <type spec>}``
- ``{"t": "record", "cls": <class>, "fields": [[name, <type spec>], ...]}``

Step and operator shapes are listed in :data:`REQUIRED`. The contract test in
``tests/unit/test_spec_contract.py`` builds specs with the client's compiler and checks
them here.
"""

from __future__ import annotations

from typing import Any

SPEC_VERSION = 3

#: The envelope columns every stream carries between stages, in this order.
ENVELOPE = (
    "key",
    "value",
    "timestamp",
    "headers",
    "topic",
    "partition",
    "offset",
    "ks_seq",
    "ks_sub",
    "ks_side",
)

REQUIRED: dict[str, tuple[str, ...]] = {
    "chain": ("input", "output", "steps", "output_schema"),
    "dedup": ("processor", "mode", "interval_ms", "store", "input", "output_schema", "packed"),
    "join": (
        "processor",
        "store",
        "left",
        "stream",
        "table",
        "output",
        "output_schema",
        "versioned",
        "history_retention_ms",
        "grace_ms",
        "joiner",
        "joiner_with_key",
        "packed",
    ),
    "sinks": ("sinks", "side_schema"),
    "dedup_id": ("processor", "input", "id_selector", "output_schema"),
}

STEP_OPS: dict[str, tuple[str, ...]] = {
    "filter": ("fn", "negate"),
    "map": ("fn",),
    "map_values": ("fn", "with_key"),
    "flat_map": ("fn",),
    "flat_map_values": ("fn", "with_key"),
    "select_key": ("fn",),
    "peek": ("fn",),
    "branch": ("predicates", "index"),
    "table_filter": ("fn", "negate"),
    "table_map_values": ("fn", "with_key"),
}

TYPE_TAGS = {
    "prim": ("spark",),
    "list": ("element",),
    "map": ("key", "value"),
    "record": ("cls", "fields"),
}


class SpecError(ValueError):
    """The client sent a spec this server package cannot run."""


def check_type(t: Any, where: str) -> None:
    if not isinstance(t, dict) or t.get("t") not in TYPE_TAGS:
        raise SpecError(f"{where}: not a type spec: {t!r}")
    for k in TYPE_TAGS[t["t"]]:
        if k not in t:
            raise SpecError(f"{where}: type spec {t['t']!r} lacks {k!r}")
    if t["t"] == "list":
        check_type(t["element"], where)
    elif t["t"] == "map":
        check_type(t["key"], where)
        check_type(t["value"], where)
    elif t["t"] == "record":
        for name, ft in t["fields"]:
            check_type(ft, f"{where}.{name}")


def check_spec(spec: Any) -> dict[str, Any]:
    """Validate ``spec`` and return it; raise :class:`SpecError` if it cannot be run."""
    if not isinstance(spec, dict):
        raise SpecError(f"an operator spec is a dict, got {type(spec).__name__}")
    version = spec.get("spec_version")
    if version != SPEC_VERSION:
        raise SpecError(
            f"operator spec version {version!r} is not supported by this kspark_server "
            f"(supports {SPEC_VERSION}); use the same kspark version on client and server"
        )
    kind = spec.get("kind")
    if kind not in REQUIRED:
        raise SpecError(f"unknown operator kind {kind!r}")
    missing = [k for k in REQUIRED[kind] if k not in spec]
    if missing:
        raise SpecError(f"{kind} spec lacks {missing}")
    if kind == "chain":
        for side in ("input", "output"):
            for part in ("key", "value"):
                check_type(spec[side][part], f"chain.{side}.{part}")
        for step in spec["steps"]:
            op = step.get("op")
            if op not in STEP_OPS:
                raise SpecError(f"unknown step op {op!r}")
            for k in (*STEP_OPS[op], "processor"):
                if k not in step:
                    raise SpecError(f"step {op!r} lacks {k!r}")
    return spec
