"""The thin client: an app built, compiled and run from a virtualenv whose pyspark is the pure
Python client ``pyspark-client`` (no JVM jars), against the session's Spark Connect server,
which runs from this (full pyspark) environment.

The virtualenv is made once per session: a bare ``venv`` into which this environment's pip
installs ``pyspark-client`` alone (``--no-deps``, a 1.6 MB download, cached by pip), plus a
``.pth`` file that appends this environment's site-packages *after* the venv's own. So
``import pyspark`` finds pyspark-client, while pandas, pyarrow and grpc come from here
without a second download. kspark itself comes from this checkout through ``PYTHONPATH``.
The tests run an app in the thin client, ``python -c`` and ``kspark submit``, ``status`` and
``stop`` from it.
If pip cannot get pyspark-client, the tests fail: they do not skip.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
import venv
from pathlib import Path
from typing import Any

import pytest
from support.submit_project import write_project

pytestmark = pytest.mark.spark

# pyspark-client has no 4.3 release: 4.2.0 is the newest, and the one kspark[client] gets
PYSPARK_CLIENT = "pyspark-client==4.2.0"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def thin_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a virtualenv that has pyspark-client and no Spark jars."""
    env_dir = tmp_path_factory.mktemp("thin-client") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-input",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            site,
            PYSPARK_CLIENT,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pip.returncode != 0:
        pytest.fail(f"pip could not install {PYSPARK_CLIENT}:\n{pip.stdout}\n{pip.stderr}")
    # appended after the venv's own site-packages: pyspark resolves to pyspark-client
    here = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    Path(site, "zz-kspark-test-deps.pth").write_text("\n".join(here) + "\n")
    return python


def run_thin(
    python: str,
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` in the thin venv, with this checkout's kspark and no Spark env."""
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_", "KSPARK_"))
        and k not in ("VIRTUAL_ENV", "PYTHONHOME")
    }
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO / "sdk"), str(REPO / "server_plugin")])
    full_env.update(env or {})
    proc = subprocess.run(
        [python, "-W", "ignore", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, (
            f"thin client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


APP = textwrap.dedent(
    """
    import dataclasses, importlib.metadata, json, os, sys
    from datetime import timedelta

    import pyspark
    import kspark
    from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
    from kspark._deps import has_spark_jars, pyspark_distribution
    from kspark.compiler.compiler import compile_topology
    from kspark.errors import ServerError

    url, base = sys.argv[1], sys.argv[2]
    home = os.path.dirname(pyspark.__file__)
    facts = {
        "pyspark_dir": home,
        "pyspark_version": pyspark.__version__,
        "client_version": importlib.metadata.version("pyspark-client"),
        "distribution": pyspark_distribution(),
        "has_jars": has_spark_jars(),
        "kspark": kspark.__file__,
    }
    try:
        kspark.connect()  # no URL: the embedded server, which needs the jars
        facts["embedded"] = "started"
    except ServerError as exc:
        facts["embedded"] = str(exc)


    @dataclasses.dataclass
    class Payment:
        id: str
        account: str
        cents: int
        ts: int


    b = StreamsBuilder()
    (
        b.stream(
            Topic.jsonl("payments", os.path.join(base, "in"), layout="value",
                        key_field="account", timestamp_field="ts"),
            key_type=str, value_type=Payment,
        )
        .deduplicate_by_key_value(lambda account, p: p.id, timedelta(seconds=30))
        .map_values(lambda p: p.cents * 10, value_type=int)
        .to(Topic.jsonl("out", os.path.join(base, "out")))
    )
    topology = b.build()
    config = StreamsConfig(
        application_id="thin-client", checkpoint_dir=os.path.join(base, "chk"), num_partitions=2
    )
    facts["compiled"] = type(compile_topology(topology, config)).__name__
    report = StreamsApp(topology, config, session=kspark.connect(url)).run_until_caught_up()
    facts["input_records"] = report.input_records
    print("FACTS " + json.dumps(facts))
    """
)

PAYMENTS = [
    # (id, account, cents, ts ms): p1 is sent again within 30 s, p2 again after 58 s
    ("p1", "ann", 5, 1_000),
    ("p2", "bob", 7, 2_000),
    ("p1", "ann", 5, 3_000),
    ("p3", "ann", 2, 4_000),
    ("p2", "bob", 7, 60_000),
]


def test_thin_client_builds_compiles_and_runs_an_app(
    thin_python: str, spark_url: str, tmp_path: Path
) -> None:
    os.makedirs(tmp_path / "in")
    with open(tmp_path / "in" / "part-0.jsonl", "w") as f:
        for pid, account, cents, ts in PAYMENTS:
            f.write(json.dumps({"id": pid, "account": account, "cents": cents, "ts": ts}) + "\n")
    (tmp_path / "app.py").write_text(APP)

    proc = run_thin(thin_python, ["app.py", spark_url, str(tmp_path)], tmp_path)
    facts = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("FACTS "))[6:])

    # the client ran on pyspark-client, from the venv, with no JVM jars and no spark-submit
    venv_dir = str(Path(thin_python).parent.parent)
    assert facts["pyspark_dir"].startswith(venv_dir)
    assert facts["distribution"] == "pyspark-client"
    assert facts["pyspark_version"] == facts["client_version"] == PYSPARK_CLIENT.split("==")[1]
    assert facts["has_jars"] is False
    assert not os.path.exists(os.path.join(facts["pyspark_dir"], "jars"))
    assert not os.path.exists(os.path.join(facts["pyspark_dir"], "bin", "spark-submit"))
    assert facts["kspark"].startswith(str(REPO / "sdk"))
    # the embedded server refuses with the install command, before starting anything
    assert "pip install 'kspark[local]'" in facts["embedded"]
    assert facts["compiled"] == "Output"
    assert facts["input_records"] == len(PAYMENTS)

    # the server wrote the output: duplicates within 30 s removed, values mapped
    rows = []
    for path in glob.glob(str(tmp_path / "out" / "**" / "*.json"), recursive=True):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    got = sorted((r["key"], r["value"]) for r in rows)
    assert got == [("ann", 20), ("ann", 50), ("bob", 70), ("bob", 70)]


def test_thin_client_connects_from_python_dash_c(
    thin_python: str, spark_url: str, tmp_path: Path
) -> None:
    # pyspark-client takes `python -c` for a doctest run and exits without a SPARK_HOME;
    # kspark.connect works around it
    code = (
        "import kspark; print('COUNT', kspark.connect(__import__('sys').argv[1]).range(7).count())"
    )
    proc = run_thin(thin_python, ["-c", code, spark_url], tmp_path)
    assert "COUNT 7" in proc.stdout


DEADLINE = 300.0  # seconds to wait for the submitted app; never a timing assertion


def test_thin_client_submits_an_app_that_outlives_it(
    thin_python: str, spark_url: str, app_id: str, tmp_path: Path
) -> None:
    # the user path "submit from a laptop that has only pyspark-client": kspark submit, status
    # and stop, each a separate process in the thin venv, against the session's server
    pkg = f"thinapp_{app_id.replace('-', '_')}"
    root, data, home = tmp_path / "project", tmp_path / "data", tmp_path / "home"
    # a helper in a sibling module that the plan never names: it runs on the server only if
    # submit ships the whole package by value, as it does with full pyspark
    write_project(root, pkg, data)
    (data / "in").mkdir(parents=True)
    with open(data / "in" / "a.jsonl", "w") as f:
        for i in range(12):
            f.write(
                json.dumps({"id": f"e{i}", "user": f"u{i % 3}", "text": f"hi {i}", "ts": 1000 * i})
                + "\n"
            )
    config = tmp_path / "app.json"
    config.write_text(json.dumps({"checkpoint_dir": str(data / "chk"), "num_partitions": 2}))
    env = {"KSPARK_HOME": str(home)}

    def cli(*args: str) -> dict[str, Any]:
        proc = run_thin(thin_python, ["-m", "kspark.cli", *args, "--json"], root, env=env)
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    handle = cli(
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
        assert handle["app_id"] == app_id and pkg in handle["modules"]
        assert (home / "apps" / f"{app_id}.json").exists()
        deadline = time.monotonic() + DEADLINE
        st: dict[str, Any] = {}
        while time.monotonic() < deadline:
            st = cli("status", "--app-id", app_id, "--remote", spark_url)
            assert st["state"] == "RUNNING", st
            if st["input_records"] >= 12:
                break
        assert st["input_records"] == 12, st
        final = cli("stop", "--app-id", app_id, "--remote", spark_url)
        assert final["state"] == "NOT_RUNNING" and final["error"] is None, final
    finally:
        # never leave a query running on the shared server
        from kspark.runtime import submit as remote

        apps = home / "apps"
        if (apps / f"{app_id}.json").exists() and remote.load_handle(
            app_id, str(apps)
        ).final is None:
            remote.stop(handle=str(apps / f"{app_id}.json"), remote=spark_url)

    rows = []
    for path in glob.glob(str(data / "out" / "**" / "*.json"), recursive=True):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    assert sorted(r["value"] for r in rows) == sorted(f"HI {i}!" for i in range(12))
