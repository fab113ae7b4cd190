"""``kspark clean-up APP_ID`` and ``StreamsApp.clean_up()``: an app's local stores go, and
nothing that kspark did not write (no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.taskharness import close_local_stores

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.cli import main
from kspark_server.localstore import TaskStore


def test_the_cli_deletes_the_apps_stores_under_the_default_root_and_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KSPARK_LOCAL_STATE_DIR", raising=False)
    default, mine = str(tmp_path / "home" / "local-state"), str(tmp_path / "mine")
    for root in (default, mine):
        TaskStore.open(root, "seen", "i", 0, application_id="clicks").reset([], {}, ("i", 1))
        TaskStore.open(root, "seen", "i", 0, application_id="orders").reset([], {}, ("i", 1))
    close_local_stores()
    os.makedirs(tmp_path / "mine" / "users" / "keep")  # not kspark's: no marker

    assert main(["clean-up", "clicks", "--state-dir", mine]) == 0
    out = capsys.readouterr().out
    assert f"removed {os.path.join(mine, 'clicks')}" in out
    assert f"removed {os.path.join(default, 'clicks')}" in out
    assert sorted(os.listdir(mine)) == ["orders", "users"]
    assert os.listdir(default) == ["orders"]

    assert main(["clean-up", "users", "--state-dir", mine]) == 0
    assert "skipped" in capsys.readouterr().out
    assert (tmp_path / "mine" / "users" / "keep").is_dir()

    assert main(["clean-up", "../x"]) == 1  # an application id names a folder
    assert "application_id" in capsys.readouterr().err


def test_an_app_that_never_ran_cleans_up_its_state_dir(tmp_path: Path) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", str(tmp_path / "in")), key_type=str, value_type=str).to(
        Topic.jsonl("out", str(tmp_path / "out"))
    )
    cfg = StreamsConfig(application_id="clicks", state_dir=str(tmp_path / "local"))
    TaskStore.open(str(tmp_path / "local"), "seen", "i", 0, application_id="clicks")
    app = StreamsApp(b.build(), cfg, session=None)
    assert app.clean_up().removed == (str(tmp_path / "local" / "clicks"),)
    assert os.listdir(tmp_path / "local") == []


def test_the_compiled_operators_name_their_application_and_state_dir(tmp_path: Path) -> None:
    from datetime import timedelta

    from kspark.compiler.compiler import compile_topology
    from kspark.compiler.stages import Stateful
    from kspark.plan import graph

    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", str(tmp_path)), key_type=str, value_type=str).deduplicate_by_key(
        timedelta(seconds=5)
    ).to(Topic.jsonl("out", str(tmp_path / "out")))
    cfg = StreamsConfig(application_id="clicks", state_dir=str(tmp_path / "local"))
    out = compile_topology(b.build(), cfg)
    stages = [s for s in graph.preorder(out.roots(), lambda s: s.inputs) if isinstance(s, Stateful)]
    assert stages
    for s in stages:
        assert s.spec.state.application_id == "clicks"
        assert s.spec.state.local_dir == str(tmp_path / "local")
