"""`kspark run --config` binds a topology's names (issue 16): the example that names its
topics and declares no types runs from a TOML file whose ``data_dir`` binds every name,
and a ``[topics]`` table binds one name elsewhere, with no change to the topology."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

CLICKS = [
    ("u1", {"id": "c1", "page": "/a"}, 1_000),
    ("u2", {"id": "c2", "page": "/health"}, 2_000),
    ("u1", {"id": "c1", "page": "/a"}, 3_000),  # a retransmission of c1
    ("u3", {"id": "c3", "page": "/books"}, 4_000),
]


def _write_clicks(folder: Path) -> None:
    folder.mkdir(parents=True)
    with open(folder / "a.jsonl", "w") as f:
        for k, v, ts in CLICKS:
            f.write(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n")


def _views(folder: Path) -> list[tuple[Any, Any]]:
    rows = []
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(root, name)) as f:
                    rows += [json.loads(line) for line in f if line.strip()]
    return sorted((json.loads(r["key"]), json.loads(r["value"])) for r in rows)


EXPECTED = [("u1", {"page": "/a", "user": "u1"}), ("u3", {"page": "/books", "user": "u3"})]


@pytest.mark.parametrize("binding", ["data_dir", "data_dir and a topics table"])
def test_kspark_run_binds_the_names_from_its_config_file(
    spark_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binding: str,
) -> None:
    from kspark.cli import main

    if spark_server is None:
        pytest.skip("needs the embedded server's URL")
    monkeypatch.syspath_prepend(str(REPO))
    data = tmp_path / "data"
    _write_clicks(data / "clicks")
    toml = [f"data_dir = {str(data)!r}", f"checkpoint_dir = {str(tmp_path / 'chk')!r}"]
    views = data / "views"
    if binding != "data_dir":
        views = tmp_path / "elsewhere"
        toml += ["", "[topics.views]", 'format = "jsonl"', f"path = {str(views)!r}"]
    config = tmp_path / "clicks.toml"
    config.write_text("\n".join(toml) + "\n")
    args = ["run", "examples.clicks:topology", "--config", str(config)]
    assert main([*args, "--remote", spark_server.url, "--app-id", "cli-clicks"]) == 0
    assert _views(views) == EXPECTED
    if binding != "data_dir":
        assert not (data / "views").exists()


def test_kspark_run_names_an_unbound_name(
    spark_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kspark.cli import main

    if spark_server is None:
        pytest.skip("needs the embedded server's URL")
    monkeypatch.syspath_prepend(str(REPO))
    config = tmp_path / "clicks.toml"
    config.write_text(f"checkpoint_dir = {str(tmp_path / 'chk')!r}\n")
    args = ["run", "examples.clicks:topology", "--config", str(config)]
    assert main([*args, "--remote", spark_server.url, "--app-id", "cli-unbound"]) == 1
    err = capsys.readouterr().err
    assert "clicks" in err and "views" in err and "data_dir" in err
