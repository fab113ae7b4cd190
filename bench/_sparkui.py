"""Spark's UI REST API, as the profile benches read it: the stages and SQL executions of
the one application of a server started with ``spark.ui.enabled=true`` on ``port``."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


class SparkUI:
    """The REST API at ``http://127.0.0.1:<port>/api/v1``."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/api/v1"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path) as r:
            return json.load(r)

    def app(self, path: str) -> Any:
        """``path`` under the server's one application."""
        return self.get(f"/applications/{self.get('/applications')[0]['id']}{path}")

    def stages(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Every stage attempt so far, by (stage id, attempt id)."""
        return {(s["stageId"], s["attemptId"]): s for s in self.app("/stages")}

    def sql_ids(self) -> set[int]:
        """The SQL executions so far."""
        return {e["id"] for e in self.app("/sql?details=false&length=10000")}

    def sql_dump(self, before: set[int], plan: bool = False) -> None:
        """Print the per-operator metrics of the SQL executions not in ``before`` (and,
        with ``plan``, each one's physical plan)."""
        q = f"/sql?details=true&planDescription={str(plan).lower()}&length=10000"
        for e in self.app(q):
            if e["id"] in before:
                continue
            print(f"   sql {e['id']} dur {e.get('duration')} {e.get('description', '')[:50]}")
            for n in e.get("nodes", []):
                ms = {m["name"]: m["value"] for m in n.get("metrics", [])}
                if ms:
                    text = "; ".join(f"{k}={v}" for k, v in ms.items()).replace("\n", " ")
                    print(f"      {n['nodeId']} {n['nodeName']}: {text[:1500]}")
            if plan:
                print(e.get("planDescription", "")[:20000])
