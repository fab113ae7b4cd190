"""The client ships stateful operators as specs (``ShippedOperator``) and builds none.

Spark's driver-side planning runner of ``transformWithStateInPandas`` unpickles each
stateful processor at every query start and calls its ``init`` to learn the state
variables: it must not import pandas for that (a third of the runner's time,
docs/design/stateful-runner.md), nor any of the operators' modules. The client's compile
must not import them either: numpy, msgspec and lmdb belong to the workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import cloudpickle
from test_spec_contract import _all_specs

import kspark_server
from kspark_server.operators.shipped import ShippedOperator
from kspark_server.spec import DedupSpec, JoinSpec

#: modules of the workers only: the operators' dependencies, and the operators
WORKER_ONLY = ("pandas", "numpy", "msgspec", "lmdb", "kspark_server.operators.base")

_HERE = os.path.dirname(__file__)


def _run(code: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=_HERE,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _shipped(kind: str, tmp_path: Path) -> tuple[str, str]:
    """The store of the ``kind`` operator of the test topology, and the path of its
    processor pickled as StreamsApp ships it: kspark_server and the user's module (here
    the one that defines the topology) by value (kspark.runtime.shipping)."""
    wanted = DedupSpec if kind == "dedup" else JoinSpec
    (spec,) = [s for s in _all_specs() if isinstance(s, wanted)]
    shipped = [kspark_server, sys.modules[_all_specs.__module__]]
    for m in shipped:
        cloudpickle.register_pickle_by_value(m)
    try:
        blob = cloudpickle.dumps(ShippedOperator(spec))
    finally:
        for m in shipped:
            cloudpickle.unregister_pickle_by_value(m)
    path = tmp_path / "op.pkl"
    path.write_bytes(blob)
    return spec.store, str(path)


#: a Python process like Spark's runners: pyspark's worker module, no kspark_server to
#: import, the processor unpickled and its ``init`` called with a handle that records the
#: state variables it declares
_RUNNER = """
import pickle, sys
import pyspark.sql.streaming.transform_with_state_driver_worker
sys.modules["kspark_server"] = None
op = pickle.loads(open({path!r}, "rb").read())
class Handle:
    names = []
    def getMapState(self, name, *a):
        self.names.append(name)
        return name
    getListState = getValueState = getMapState
h = Handle()
op.init(h)
"""


@pytest.mark.parametrize("kind", ["dedup", "join"])
def test_the_planning_runner_unpickles_and_inits_without_pandas(kind: str, tmp_path: Path) -> None:
    store, path = _shipped(kind, tmp_path)
    code = _RUNNER.format(path=path) + (
        f"loaded = [m for m in {WORKER_ONLY!r} if m in sys.modules]\n"
        "print(type(op).__name__, ','.join(h.names), 'loaded:', *loaded)\n"
    )
    assert _run(code) == [
        "ShippedOperator",
        f"{store},{store}__log,{store}__version",
        "loaded:",
    ]


@pytest.mark.parametrize("kind", ["dedup", "join"])
def test_a_worker_builds_the_operator_without_kspark_server(kind: str, tmp_path: Path) -> None:
    """The operators' code travels inside the processor: a worker that cannot import
    kspark_server builds the operator at its first batch, with the task's state
    variables."""
    store, path = _shipped(kind, tmp_path)
    code = _RUNNER.format(path=path) + (
        "built = op.operator()\nprint(type(built).__name__, built.base, built.log, built.version)\n"
    )
    name = "DedupProcessor" if kind == "dedup" else "JoinProcessor"
    assert _run(code) == [name, store, f"{store}__log", f"{store}__version"]


def test_the_client_side_compile_builds_no_operator() -> None:
    """Compiling the stateful topology and making its processors imports none of the
    operators' modules or their dependencies."""
    code = (
        "import sys\n"
        "import kspark.compiler.lowering.build, kspark.compiler.lowering.stateful\n"
        "from test_spec_contract import _all_specs\n"
        "from kspark_server.operators.shipped import ShippedOperator\n"
        "from kspark_server.spec import StatefulSpec\n"
        "ops = [ShippedOperator(s) for s in _all_specs() if isinstance(s, StatefulSpec)]\n"
        "assert len(ops) == 2\n"
        f"loaded = [m for m in {WORKER_ONLY!r} if m in sys.modules]\n"
        "loaded += [m for m in sys.modules if m.startswith('kspark_server.operators.')\n"
        "           and m != 'kspark_server.operators.shipped']\n"
        "print('loaded:', *loaded)\n"
    )
    assert _run(code) == ["loaded:"]
