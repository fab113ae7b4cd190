"""Which pyspark kspark runs on: the messages for a missing pyspark, for a thin client asked
to start the embedded server, and for pyspark and pyspark-client installed together."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from kspark import _deps
from kspark.errors import MissingDependencyError, ServerError
from kspark.runtime import server


def test_missing_pyspark_names_both_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "pyspark" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingDependencyError, match=r"kspark\[client\].*kspark\[local\]") as err:
        _deps.check_pyspark()
    assert isinstance(err.value, ImportError)
    assert err.value.code == "KSPARK_MISSING_DEPENDENCY"


def test_pyspark_and_pyspark_client_in_one_directory_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    home = _deps._pyspark_dir()
    monkeypatch.setattr(_deps, "_owner_dirs", lambda: {"pyspark": home, "pyspark-client": home})
    with pytest.warns(RuntimeWarning, match="pip uninstall -y pyspark pyspark-client"):
        _deps.check_pyspark()
    assert _deps.pyspark_distribution() == "pyspark-client"


def test_pyspark_client_elsewhere_on_the_path_does_not_warn(
    monkeypatch: pytest.MonkeyPatch, recwarn: Any
) -> None:
    home = _deps._pyspark_dir()
    monkeypatch.setattr(
        _deps, "_owner_dirs", lambda: {"pyspark": home, "pyspark-client": "/elsewhere/pyspark"}
    )
    _deps.check_pyspark()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert _deps.pyspark_distribution() == "pyspark"


def test_embedded_server_without_jars_names_kspark_local(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a SPARK_HOME without bin/spark-submit and jars/, as pyspark-client's directory is
    os.makedirs(tmp_path / "sql")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert not _deps.has_spark_jars(str(tmp_path))
    with pytest.raises(ServerError, match=r"pip install 'kspark\[local\]'") as err:
        server.EmbeddedServer().start()
    assert err.value.params["spark_home"] == str(tmp_path)


def test_full_pyspark_has_the_jars() -> None:
    # the development environment (kspark[dev] -> kspark[local]) must have full pyspark
    assert _deps.pyspark_distribution() == "pyspark"
    assert _deps.has_spark_jars()
