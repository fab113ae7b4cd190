"""Spark's driver-side planning runner of ``transformWithStateInPandas`` unpickles each
stateful operator at every query start; it must not import pandas for that (a third of
the runner's time, docs/design/stateful-runner.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import cloudpickle
from test_spec_contract import _all_specs

import kspark_server
from kspark_server.operators.registry import make_operator
from kspark_server.spec import DedupSpec, JoinSpec


@pytest.mark.parametrize("kind", ["dedup", "join"])
def test_the_pickled_operator_unpickles_without_pandas(kind: str, tmp_path: Path) -> None:
    wanted = DedupSpec if kind == "dedup" else JoinSpec
    (spec,) = [s for s in _all_specs() if isinstance(s, wanted)]
    processor = make_operator(spec)
    # as StreamsApp ships it: kspark_server and the user's module (here the one that
    # defines the topology) by value (kspark.runtime.shipping)
    shipped = [kspark_server, sys.modules[_all_specs.__module__]]
    for m in shipped:
        cloudpickle.register_pickle_by_value(m)
    try:
        blob = cloudpickle.dumps(processor)
    finally:
        for m in shipped:
            cloudpickle.unregister_pickle_by_value(m)
    path = tmp_path / "op.pkl"
    path.write_bytes(blob)
    # a process like the runner's: pyspark's worker module, and no kspark_server to import
    code = (
        "import pickle, sys\n"
        "import pyspark.sql.streaming.transform_with_state_driver_worker\n"
        "sys.modules['kspark_server'] = None\n"
        f"op = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        "print(type(op).__name__, 'pandas' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    name = "DedupProcessor" if kind == "dedup" else "JoinProcessor"
    assert done.stdout.split() == [name, "False"]
