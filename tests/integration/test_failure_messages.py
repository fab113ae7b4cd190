"""Errors raised on the server reach the client with their cause (issue 21): a user
function's exception and its processor, through ``kspark run`` as a user sees it, with the
full trace in the log file the message names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import kspark
import kspark_server

pytestmark = pytest.mark.spark

APP = """
from kspark import StreamsBuilder, Topic


def rate_of(value: str) -> float:
    raise ValueError(f"no rate for {{value!r}}")


def build():
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", {inp!r}), key_type=str, value_type=str)
        .map_values(rate_of, value_type=float)
        .to(Topic.jsonl("out", {out!r}))
    )
    return b.build()
"""


def test_a_user_function_error_names_its_message_and_processor(
    spark_url: str, tmp_path: Path
) -> None:
    pkg = f"failing_{uuid.uuid4().hex[:6]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    inp, out = tmp_path / "in", tmp_path / "out"
    (tmp_path / pkg / "topo.py").write_text(APP.format(inp=str(inp), out=str(out)))
    inp.mkdir()
    (inp / "a.jsonl").write_text(json.dumps({"key": "k", "value": "XYZ", "timestamp": 1}) + "\n")
    config = tmp_path / "app.json"
    config.write_text(json.dumps({"checkpoint_dir": str(tmp_path / "chk")}))
    roots = [os.path.dirname(os.path.dirname(p)) for p in (kspark.__file__, kspark_server.__file__)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    env.update({"PYTHONPATH": os.pathsep.join(dict.fromkeys(roots)), "KSPARK_HOME": str(tmp_path)})
    args = ["run", f"{pkg}.topo:build", "--remote", spark_url, "--config", str(config)]
    proc = subprocess.run(
        [sys.executable, "-m", "kspark.cli", *args, "--app-id", pkg],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "Traceback" not in err.splitlines()[0], err  # kspark's message, not a traceback
    assert "KSPARK_PROCESSING_FAILED" in err, err
    assert "KSTREAM-MAPVALUES-0000000001" in err, err
    assert "ValueError: no rate for 'XYZ'" in err, err
    m = re.search(r"full trace: (\S+)", err)
    assert m is not None, err
    log = Path(m.group(1))
    assert log.parent == tmp_path / "logs" and "no rate for" in log.read_text()
