"""A standalone Spark Connect server from ``kspark server start``, with workers whose Python
lacks kspark (issue 21, acceptance).

The worker Python is a virtualenv made with ``python -m venv --without-pip`` (fast, no
download) whose one ``.pth`` file points at a directory of symlinks to this environment's
site-packages entries, minus kspark's own (``kspark``, ``kspark_server``, ``kspark_demo``,
their dist-info and editable-install hooks) and minus ``confluent_kafka``. ``.pth`` files are
read only in site directories, so this environment's own ``.pth`` hooks (the editable
install of kspark) are not followed from there: the workers can import pyspark, pyarrow,
pandas, grpc, msgspec and lmdb, and cannot import kspark or confluent-kafka. That is a
worker Python as a user sets one up for a server, and one that lacks exactly one package
the Kafka path through kspark's Python source needs.

Only one Spark JVM may run on the test machine: conftest runs this module before every
other integration test, before the session's server starts (this module uses none of its
fixtures), and the fixture stops what it started, by its pid, whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kspark
import kspark_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEADLINE = 300.0  # seconds; generous for a 2-core machine, never a timing assertion
REPO = Path(__file__).resolve().parents[2]
_NOT_ON_WORKERS = ("kspark", "confluent_kafka", "__editable__")


def _pythonpath() -> str:
    roots = [os.path.dirname(os.path.dirname(p)) for p in (kspark.__file__, kspark_server.__file__)]
    return os.pathsep.join(dict.fromkeys(roots))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_worker_python(root: Path) -> str:
    """A virtualenv that has this environment's packages but not kspark or confluent-kafka."""
    venv = root / "worker-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    shim = root / "worker-site"
    shim.mkdir()
    source = sysconfig.get_paths()["purelib"]
    for entry in os.listdir(source):
        name = entry.replace("-", "_").lower()
        if entry.endswith(".pth") or name.startswith(_NOT_ON_WORKERS):
            continue
        os.symlink(os.path.join(source, entry), shim / entry)
    (Path(site) / "kspark-test-worker.pth").write_text(f"{shim}\n")
    return python


class Cli:
    """``python -m kspark.cli`` in a fresh process, with the code under test."""

    def __init__(self, cwd: Path, home: Path, **env: str) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
        self.env.update({"PYTHONPATH": _pythonpath(), "KSPARK_HOME": str(home), **env})

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kspark.cli", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )

    def json(self, *args: str) -> dict[str, Any]:
        proc = self(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """``(url with token, worker python, kspark home)`` of a server that
    ``kspark server start`` started; stopped with ``kspark server stop``, then by pid."""
    root = tmp_path_factory.mktemp("standalone")
    home = root / "home"
    python = make_worker_python(root)
    cli = Cli(REPO, home)
    port = _free_port()
    started = cli("server", "start", "--master", "local[2]", "--port", str(port),
                  "--worker-python", python, "--conf", "spark.sql.shuffle.partitions=2")  # fmt: skip
    state_file = home / "server" / "server.json"
    pid = json.loads(state_file.read_text())["pid"] if state_file.exists() else None
    ok = False
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        token = (home / "server" / "token").read_text().strip()
        url = f"sc://localhost:{port}/;token={token}"
        assert url in started.stdout
        status = cli("server", "status")
        assert status.returncode == 0 and token not in status.stdout, status.stdout
        assert cli("server", "status", "--url").stdout.strip() == url
        ok = True
        yield url, python, home
    finally:
        stopped = cli("server", "stop")
        if pid is not None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.5)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if ok:  # else the start's failure is the one to report
            assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def test_example_app_with_a_dead_letter_config_file(
    standalone: tuple[str, str, Path], tmp_path: Path
) -> None:
    """examples/payments.py on the data kspark demo writes (malformed lines included),
    submitted with a config file that sends unreadable records to a dead-letter topic."""
    from kspark_demo.app import generate

    url, _python, home = standalone
    data = tmp_path / "data"
    generate(str(data), 400, part=0)
    config = tmp_path / "payments.toml"
    config.write_text(
        f'checkpoint_dir = "{data / "chk"}"\n'
        "num_partitions = 2\n"
        "trigger_interval = 1\n"
        'deserialization_exception_handler = "dead-letter-queue"\n'
        f'data_dir = "{data / "out"}"\n'
        "[dead_letter_queue_topic]\n"
        f'name = "dlq"\nformat = "parquet"\npath = "{data / "out" / "dlq"}"\n'
        # the topology names its topics; the demo's files hold values, with key and time
        # among their fields (as examples/payments.toml binds them)
        "[topics.payments]\n"
        f'format = "jsonl"\npath = "{data / "payments"}"\nlayout = "value"\n'
        'key_field = "account"\ntimestamp_field = "ts"\n'
        "[topics.rates]\n"
        f'format = "jsonl"\npath = "{data / "rates"}"\nlayout = "value"\n'
        'key_field = "currency"\ntimestamp_field = "ts"\n'
    )
    app_id = f"payments-{uuid.uuid4().hex[:6]}"
    cli = Cli(REPO, home, KSPARK_EXAMPLE_DATA=str(data))
    submitted = cli("submit", "examples.payments:topology", "--remote", url, "--config",
                    str(config), "--app-id", app_id, "--json")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    try:
        deadline = time.monotonic() + DEADLINE
        part = 0
        st: dict[str, Any] = {}
        summary = ""
        # the text status is what a user reads: it must show the rate of the last batch
        # that read records (this app's second sub-topology runs batches that read none)
        while time.monotonic() < deadline:
            st = cli.json("status", "--app-id", app_id, "--remote", url)
            assert st["state"] == "RUNNING", st
            summary = cli("status", "--app-id", app_id, "--remote", url).stdout
            last = [line for line in summary.splitlines() if line.startswith("last batch")]
            if last and " rows/s" in last[0] and " 0 rows/s" not in last[0]:
                break
            if st["input_records"] and part < 5:
                part += 1  # the last trigger had no data: give it a batch with rows
                generate(str(data), 100, part=part)
            time.sleep(1)
        assert st["input_records"] > 0, st
        assert " rows/s" in summary and " 0 rows/s" not in summary, summary
        assert list((data / "out" / "dlq").glob("batch_id=*")), "no dead letters written"
        stopped = cli("stop", "--app-id", app_id, "--remote", url)
        assert stopped.returncode == 0, stopped.stderr
        first = stopped.stdout.splitlines()[0]
        assert first.startswith(f"stopped app {app_id}: query "), stopped.stdout
        assert "last batch none" not in first and "query None" not in first, first
        final = cli.json("status", "--app-id", app_id, "--remote", url)
        assert final["state"] == "NOT_RUNNING" and final["error"] is None, final
        assert final["stopped"] is True, final
    finally:
        from kspark.runtime import submit as remote

        path = home / "apps" / f"{app_id}.json"
        if path.exists() and remote.load_handle(app_id, str(path.parent)).final is None:
            remote.stop(handle=str(path), remote=url)


def test_demo_with_a_relative_data_dir(standalone: tuple[str, str, Path], tmp_path: Path) -> None:
    """``kspark demo --data-dir data --remote URL`` run in a folder of the client: the app
    writes ``./data`` and the demo reads its results back from there (the relative path is
    made absolute on the client, once, for both)."""
    url, _python, home = standalone
    proc = Cli(tmp_path, home)("demo", "--data-dir", "data", "--remote", url, "--payments", "200")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"data in {tmp_path / 'data'}" in proc.stdout, proc.stdout[:500]
    assert list((tmp_path / "data" / "converted").glob("batch_id=*")), proc.stdout[-2000:]
    assert "PATH_NOT_FOUND" not in proc.stdout + proc.stderr
    assert "\ndone in " in proc.stdout, proc.stdout[-2000:]


KAFKA_APP = """
from kspark import StreamsBuilder, Topic


def build():
    b = StreamsBuilder()
    (
        b.stream(Topic.kafka("in", bootstrap_servers="localhost:1"), key_type=str, value_type=str)
        .map_values(str.upper, value_type=str)
        .to(Topic.jsonl("out", {out!r}))
    )
    return b.build()
"""


def test_a_worker_python_without_a_needed_package_is_named_and_no_query_starts(
    standalone: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, python, home = standalone
    pkg = f"kafkaapp_{uuid.uuid4().hex[:6]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "topo.py").write_text(KAFKA_APP.format(out=str(tmp_path / "out")))
    config = tmp_path / "app.json"
    chk = tmp_path / "chk"
    config.write_text(json.dumps({"checkpoint_dir": str(chk), "kafka_client": "python"}))
    proc = Cli(tmp_path, home)("submit", f"{pkg}.topo:build", "--remote", url, "--config",
                               str(config), "--app-id", pkg, "--wait", "0")  # fmt: skip
    assert proc.returncode == 1
    err = proc.stderr
    assert "KSPARK_SERVER_FAILED" in err, err
    assert "confluent_kafka (confluent-kafka): ModuleNotFoundError" in err, err
    assert f"worker Python: {python}" in err, err
    assert f"{python} -m pip install 'confluent-kafka" in err, err
    assert "no query was started" in err
    assert not (chk / "query" / "offsets").exists()
    assert not (chk / "query" / "metadata").exists()
