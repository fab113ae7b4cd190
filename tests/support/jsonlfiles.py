"""Topics as folders of JSON lines in the envelope's layout, for tests that run apps
through ``Topic.jsonl``: write an input file whole, read back a sink's values."""

from __future__ import annotations

import json
import os
from typing import Any


def write_jsonl(folder: str, name: str, rows: list[tuple[str, str, int]]) -> None:
    """File ``name`` of ``(key, value, timestamp)`` records in ``folder``, appearing whole
    (written aside, then renamed), as a file source must see it."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        for k, v, ts in rows:
            f.write(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n")
    os.replace(tmp, os.path.join(folder, name))


def jsonl_values(folder: str) -> list[str]:
    """The values of every record a sink wrote under ``folder``, sorted (Spark's metadata,
    hidden and checksum files left out)."""
    rows: list[dict[str, Any]] = []
    for root, _, files in os.walk(folder):
        if "_spark_metadata" in root:
            continue
        for name in files:
            if not name.startswith((".", "_")) and not name.endswith(".crc"):
                with open(os.path.join(root, name)) as f:
                    rows.extend(json.loads(line) for line in f if line.strip())
    return sorted(r["value"] for r in rows)
