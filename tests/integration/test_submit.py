"""``kspark submit``, ``status`` and ``stop`` as separate processes against the test server.

The topology lives in a package in a temporary directory that the server's workers cannot
import, and it calls a helper from a sibling module that appears nowhere in the plan: the
app runs only if ``submit`` ships the whole package by value.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.submit_project import write_names_project, write_project

import kspark
import kspark_server

pytestmark = pytest.mark.spark

DEADLINE = 300.0  # seconds; generous for a 2-core machine, never a timing assertion


def _pythonpath() -> str:
    # the code under test, wherever it is checked out
    roots = [os.path.dirname(os.path.dirname(p)) for p in (kspark.__file__, kspark_server.__file__)]
    return os.pathsep.join(dict.fromkeys(roots))


class Cli:
    """Runs ``python -m kspark.cli`` in a fresh process."""

    def __init__(self, cwd: Path, home: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
        self.env.update({"PYTHONPATH": _pythonpath(), "KSPARK_HOME": str(home)})

    def __call__(self, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if home is not None:
            env["KSPARK_HOME"] = str(home)
        return subprocess.run(
            [sys.executable, "-m", "kspark.cli", *args],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )

    def json(self, *args: str) -> dict[str, Any]:
        proc = self(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


def poll(what: str, check: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    """Call ``check`` until it returns a result, or fail at the deadline."""
    deadline = time.monotonic() + DEADLINE
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        last = check()
        if last is not None and last.get("ok"):
            return last
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def write_events(directory: Path, name: str, start: int, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}"
    with open(tmp, "w") as f:
        for i in range(start, start + count):
            f.write(
                json.dumps({"id": f"e{i}", "user": f"u{i % 3}", "text": f"hi {i}", "ts": 1000 * i})
                + "\n"
            )
    os.replace(tmp, directory / name)  # the file source must never see a partial file


def read_outputs(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for path in glob.glob(str(directory / "**" / "*.json"), recursive=True):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, str, Path]]:
    """A package ``<pkg>`` (topology + helpers) in a temporary directory, and the data dir."""
    pkg = f"subapp_{uuid.uuid4().hex[:8]}"
    root, data = tmp_path / "project", tmp_path / "data"
    write_project(root, pkg, data)
    yield root, pkg, data


def test_submit_status_stop(
    spark_url: str, app_id: str, project: tuple[Path, str, Path], tmp_path: Path
) -> None:
    root, pkg, data = project
    config = tmp_path / "app.json"
    config.write_text(
        json.dumps(
            {
                "checkpoint_dir": str(data / "chk"),
                "num_partitions": 2,
                "trigger_interval": 1,
            }
        )
    )
    cli = Cli(root, tmp_path / "home")
    write_events(data / "in", "a.jsonl", 0, 20)

    handle = cli.json(
        "submit",
        f"{pkg}.topo:build",
        "--remote",
        spark_url,
        "--config",
        str(config),
        "--app-id",
        app_id,
    )
    try:
        # the submitting process has exited; the app is still there
        assert handle["app_id"] == app_id
        assert pkg in handle["modules"]  # the package, not only the topology's module
        assert "token" not in handle["remote"]
        assert handle["checkpoint"] == str(data / "chk" / "query")
        assert [(o["name"], o["location"]) for o in handle["outputs"]] == [
            ("shouts", str(data / "out"))
        ]
        assert os.path.exists(tmp_path / "home" / "apps" / f"{app_id}.json")

        def processed(n: int) -> Callable[[], dict[str, Any]]:
            def check() -> dict[str, Any]:
                st = cli.json("status", "--app-id", app_id, "--remote", spark_url)
                assert st["state"] == "RUNNING", st
                return {**st, "ok": st["input_records"] >= n}

            return check

        st = poll("the first file", processed(20))
        assert st["query_id"] == handle["query_id"] and st["batches"] >= 1
        assert st["last_progress"]["batchId"] is not None

        # it keeps processing new input with no client attached
        write_events(data / "in", "b.jsonl", 20, 10)
        poll("the second file", processed(30))

        # a second submit of the same app is refused: from this client's handle ...
        again = cli(
            "submit",
            f"{pkg}.topo:build",
            "--remote",
            spark_url,
            "--config",
            str(config),
            "--app-id",
            app_id,
            "--wait",
            "0",
        )
        assert again.returncode == 1 and "KSPARK_APP_ALREADY_RUNNING" in again.stderr, again.stderr
        # ... and, with no handle (another client), by the server: the checkpoint is in use
        elsewhere = cli(
            "submit",
            f"{pkg}.topo:build",
            "--remote",
            spark_url,
            "--config",
            str(config),
            "--app-id",
            app_id,
            "--wait",
            "0",
            home=tmp_path / "other-home",
        )
        assert elsewhere.returncode == 1, elsewhere.stderr
        assert "KSPARK_APP_ALREADY_RUNNING" in elsewhere.stderr, elsewhere.stderr
        assert cli.json("status", "--app-id", app_id, "--remote", spark_url)["state"] == "RUNNING"

        final = cli.json("stop", "--app-id", app_id, "--remote", spark_url)
        assert final["state"] == "NOT_RUNNING", final
        assert final["error"] is None
    finally:
        # never leave a query running on the shared server
        from kspark.runtime import submit as remote

        path = tmp_path / "home" / "apps" / f"{app_id}.json"
        if path.exists() and remote.load_handle(app_id, str(path.parent)).final is None:
            remote.stop(handle=str(path), remote=spark_url)

    rows = read_outputs(data / "out")
    assert sorted(r["value"] for r in rows) == sorted(f"HI {i}!" for i in range(30))
    assert {r["key"] for r in rows} == {"u0", "u1", "u2"}

    # after stop the session is released; status says so, from the handle
    after = cli.json("status", "--app-id", app_id, "--remote", spark_url)
    assert after["state"] == "NOT_RUNNING"
    assert "session was closed" in after["message"]


def test_submit_binds_a_names_only_topology_from_its_config_file(
    spark_url: str, app_id: str, tmp_path: Path
) -> None:
    """``kspark submit`` of a topology that only names its topics: ``--config`` binds
    ``events`` in its topics table (a value-layout folder, with the record type the
    topology does not declare) and ``shouts`` through ``data_dir``."""
    pkg = f"subnames_{uuid.uuid4().hex[:8]}"
    root, data = tmp_path / "project", tmp_path / "data"
    write_names_project(root, pkg)
    config = tmp_path / "app.json"
    config.write_text(
        json.dumps(
            {
                "checkpoint_dir": str(data / "chk"),
                "num_partitions": 2,
                "trigger_interval": 1,
                "data_dir": str(data),
                "topics": {
                    "events": {
                        "format": "jsonl",
                        "path": str(data / "in"),
                        "layout": "value",
                        "key_field": "user",
                        "timestamp_field": "ts",
                        "key_type": "str",
                        "value_type": f"{pkg}.topo:Event",
                    }
                },
            }
        )
    )
    cli = Cli(root, tmp_path / "home")
    write_events(data / "in", "a.jsonl", 0, 12)
    handle = cli.json(
        "submit", f"{pkg}.topo:build", "--remote", spark_url, "--config", str(config),
        "--app-id", app_id,
    )  # fmt: skip
    try:
        assert [(o["name"], o["location"]) for o in handle["outputs"]] == [
            ("shouts", str(data / "shouts"))  # bound by data_dir
        ]

        def check() -> dict[str, Any]:
            st = cli.json("status", "--app-id", app_id, "--remote", spark_url)
            assert st["state"] == "RUNNING", st
            return {**st, "ok": st["input_records"] >= 12}

        poll("the events", check)
        final = cli.json("stop", "--app-id", app_id, "--remote", spark_url)
        assert final["state"] == "NOT_RUNNING" and final["error"] is None, final
    finally:
        from kspark.runtime import submit as remote

        path = tmp_path / "home" / "apps" / f"{app_id}.json"
        if path.exists() and remote.load_handle(app_id, str(path.parent)).final is None:
            remote.stop(handle=str(path), remote=spark_url)

    rows = read_outputs(data / "shouts")

    def text(x: Any) -> Any:  # a dynamic value is written as its JSON
        return json.loads(x) if isinstance(x, str) and x.startswith('"') else x

    assert sorted(text(r["value"]) for r in rows) == sorted(f"HI {i}!" for i in range(12))
    assert {text(r["key"]) for r in rows} == {"u0", "u1", "u2"}
