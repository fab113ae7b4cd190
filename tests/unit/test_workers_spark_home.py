"""The ``SPARK_HOME`` a server kspark starts gets: the installed pyspark without the zips
that made every Python worker compile pyspark and py4j again (``workers_spark_home``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark
import pytest

from kspark.runtime.server import server_environment, workers_spark_home

INSTALLED = os.path.dirname(os.path.abspath(pyspark.__file__))


def test_a_copy_of_links_without_the_zip(tmp_path: Path) -> None:
    home = workers_spark_home(INSTALLED, sys.executable, str(tmp_path))
    assert home == str(tmp_path / "spark-home")
    assert os.path.samefile(os.path.join(home, "jars"), os.path.join(INSTALLED, "jars"))
    assert os.path.isfile(os.path.join(home, "bin", "spark-submit"))
    lib = os.listdir(os.path.join(home, "python", "lib"))
    assert "pyspark.zip" not in lib
    # py4j's zip goes too: site-packages holds the same py4j, with its bytecode
    zips = os.listdir(os.path.join(INSTALLED, "python", "lib"))
    assert any(n.startswith("py4j-") for n in zips)
    assert sorted(lib) == sorted(
        n for n in zips if n != "pyspark.zip" and not n.startswith("py4j-")
    )
    # a second start of the same server (kspark server start) reuses it
    assert workers_spark_home(INSTALLED, sys.executable, str(tmp_path)) == home
    assert [p.name for p in tmp_path.iterdir()] == ["spark-home"]


def test_py4j_of_another_version_keeps_its_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kspark.runtime import server

    lib = os.path.join(INSTALLED, "python", "lib")
    py4j_zip = [n for n in os.listdir(lib) if n.startswith("py4j-")]
    monkeypatch.setattr(server, "_site_py4j_version", lambda: "0.0.0")
    home = workers_spark_home(INSTALLED, sys.executable, str(tmp_path))
    assert sorted(os.listdir(os.path.join(home, "python", "lib"))) == py4j_zip
    # a copy made with other zips is made again, not reused
    monkeypatch.undo()
    assert workers_spark_home(INSTALLED, sys.executable, str(tmp_path)) == home
    assert os.listdir(os.path.join(home, "python", "lib")) == []


def test_home_itself_where_the_workers_pyspark_may_differ(tmp_path: Path) -> None:
    # another Python for the workers: its pyspark (if any) may not be the installed one
    assert workers_spark_home(INSTALLED, "/opt/other/python", str(tmp_path)) == INSTALLED
    # a Spark distribution named by SPARK_HOME: its zip is its own pyspark
    dist = tmp_path / "spark-4.3.0-bin"
    (dist / "python" / "lib").mkdir(parents=True)
    assert workers_spark_home(str(dist), sys.executable, str(tmp_path)) == str(dist)
    assert not (tmp_path / "spark-home").exists()


def test_home_itself_where_pyspark_is_not_installed_in_site_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyspark found through PYTHONPATH, which the server's environment leaves out: the
    # workers would find no pyspark without the zip
    from kspark.runtime import server

    monkeypatch.setattr(server, "_site_dirs", lambda: [str(tmp_path / "elsewhere")])
    assert workers_spark_home(INSTALLED, sys.executable, str(tmp_path)) == INSTALLED


def test_the_server_environment_names_the_copy(tmp_path: Path) -> None:
    env = server_environment(
        home=INSTALLED,
        python=sys.executable,
        token="t",
        workdir=str(tmp_path),
        local_state=str(tmp_path / "local-state"),
    )
    assert env["SPARK_HOME"] == str(tmp_path / "spark-home")
