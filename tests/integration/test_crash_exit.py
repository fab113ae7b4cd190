"""A client process whose server is killed under a running app ends as soon as it is done,
instead of idling for minutes in pyspark's exit hook (issue 22, item 7).

This test kills the session's server and restarts it, so it runs with the crash tests,
last (tests/conftest.py orders files named test_crash* last).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

CLIENT = """
import json, os, sys

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic, connect

data = sys.argv[2]
os.makedirs(f"{data}/in")
with open(f"{data}/in/0.json", "w") as f:
    f.write(json.dumps({"key": "k", "value": "v", "timestamp": 1}) + "\\n")
b = StreamsBuilder()
b.stream(Topic.jsonl("in", f"{data}/in"), key_type=str, value_type=str).map_values(
    str.upper, value_type=str
).to(Topic.jsonl("out", f"{data}/out"))
app = StreamsApp(
    b.build(),
    StreamsConfig(application_id="exit-after-crash", checkpoint_dir=f"{data}/checkpoint"),
    session=connect(sys.argv[1]),
)
app.start()
print("started", flush=True)
sys.stdin.readline()  # the test kills the server, then lets this process end
print("exiting", flush=True)
"""


def _read_line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if ready:
            return proc.stdout.readline().strip()
    raise AssertionError("the client printed nothing before the deadline")


def test_a_client_exits_within_seconds_after_its_server_is_killed(
    spark_server: Any, tmp_path: Path
) -> None:
    if spark_server is None:
        pytest.skip("needs the embedded server (it is killed and restarted)")
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(CLIENT))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), str(REPO / "server_plugin")]),
    }
    # stderr to a file: pyspark logs after the kill, and a full pipe would block the client
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script), spark_server.url, str(tmp_path / "data")],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert _read_line(proc, time.monotonic() + 180) == "started"
        spark_server.kill()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert _read_line(proc, time.monotonic() + 30) == "exiting"
        # from its last line to its end: kspark's exit hook probes the server (about 1 s
        # for a refused connection at most) and closes the orphaned session
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("the client was still alive 10 s after its last line")
        assert proc.returncode == 0, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if spark_server.process is None or spark_server.process.poll() is not None:
            spark_server.start(same_port=True)
