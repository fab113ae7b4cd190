"""One rule for a relative path, for an app and for every reader of its output: it is made
absolute on the client, against the client's working directory, before anything reaches
the server (docs/deployment.md, "Paths")."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.cli import load_config
from kspark.errors import InvalidArgumentError
from kspark_demo import run as demo
from kspark_demo.app import build_topology, demo_config


class Connected(Exception):
    """Raised in place of a connection: the test stops where the demo would connect."""


def test_the_demo_takes_a_relative_data_dir_against_the_client_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kspark demo --data-dir data --remote URL``: the folder it names, for the app and
    for the read-back of the results, is ``./data`` of the folder the demo runs in."""
    monkeypatch.chdir(tmp_path)
    seen: list[str | None] = []

    def connect(remote: str | None) -> Any:
        seen.append(remote)
        raise Connected

    monkeypatch.setattr(demo, "connect", connect)
    out = io.StringIO()
    with pytest.raises(Connected):
        demo.run_demo(data_dir="data", remote="sc://server:15002", out=out)
    assert seen == ["sc://server:15002"]
    assert out.getvalue().splitlines()[0] == f"kspark demo: data in {tmp_path / 'data'}"


def test_the_demo_reads_back_the_folders_its_app_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = StreamsApp(build_topology(), demo_config("data"))
    where = {o.name: o.location for o in app.outputs()}
    data = tmp_path / "data"
    assert where == {
        "converted": str(data / "converted"),
        "totals": str(data / "totals"),
        "dlq": str(data / "out" / "dlq"),
    }


def test_a_config_file_s_relative_paths_are_taken_against_the_client_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not against the file's own folder, and not on the server."""
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "app.toml"
    config.write_text(
        'checkpoint_dir = "chk"\ndata_dir = "data"\n'
        '[dead_letter_queue_topic]\nname = "dlq"\nformat = "parquet"\npath = "out/dlq"\n'
        '[topics.orders]\nformat = "jsonl"\npath = "~/orders"\n'
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load_config("../conf/app.toml", "shop")
    b = StreamsBuilder()
    b.stream("orders").to("checked")
    app = StreamsApp(b.build(), cfg)
    assert cfg.checkpoint_dir == str(work / "chk")
    assert {o.name: o.location for o in app.outputs()} == {
        "checked": str(work / "data" / "checked"),
        "dlq": str(work / "out" / "dlq"),
    }
    (source,) = app.topology.sources()
    assert source.topic is not None and source.topic.path == str(tmp_path / "home" / "orders")


def test_outputs_lists_each_sink_once_and_the_dead_letter_queue() -> None:
    b = StreamsBuilder()
    s = b.stream("orders")
    s.to("checked")
    s.filter(lambda k, v: True).to("checked")
    s.to(Topic.kafka("audit", bootstrap_servers="k:9092"))
    config = StreamsConfig(
        application_id="shop",
        data_dir="/data",
        dead_letter_queue_topic=Topic.parquet("dlq", "/data/dlq"),
    )
    app = StreamsApp(b.build(), config)
    assert [o.describe() for o in app.outputs()] == [
        "checked (jsonl) -> /data/checked/",
        "audit (kafka) -> kafka://k:9092/audit",
        "dlq (dead letters) -> /data/dlq/",
    ]


def test_read_output_names_the_outputs_it_can_read() -> None:
    """Refused before the session is used: no Spark is needed to say what is wrong."""
    b = StreamsBuilder()
    s = b.stream("orders")
    s.to("checked")
    s.to(Topic.kafka("audit", bootstrap_servers="k:9092"))
    app = StreamsApp(b.build(), StreamsConfig(application_id="shop", data_dir="/data"))
    with pytest.raises(InvalidArgumentError, match=r"no topic 'orders'.*\['audit', 'checked'\]"):
        app.read_output("orders")
    with pytest.raises(InvalidArgumentError, match="kafka://k:9092/audit: read it with a Kafka"):
        app.read_output("audit")
