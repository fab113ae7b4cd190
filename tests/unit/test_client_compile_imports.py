"""The client compiles stateful operators into specs and builds none of them: numpy,
msgspec and lmdb, and the operators' modules, belong to the workers."""

from __future__ import annotations

import os
import subprocess
import sys

#: modules of the workers only: the operators' dependencies, and the operators
WORKER_ONLY = ("numpy", "msgspec", "lmdb", "kspark_server.operators.base")

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


def test_the_client_side_compile_builds_no_operator() -> None:
    """Compiling the stateful topology into its specs imports none of the operators'
    modules or their dependencies."""
    code = (
        "import sys\n"
        "import kspark.compiler.lowering.build, kspark.compiler.lowering.stateful\n"
        "from test_spec_contract import _all_specs\n"
        "from kspark_server.spec import StatefulSpec\n"
        "specs = [s for s in _all_specs() if isinstance(s, StatefulSpec)]\n"
        "assert len(specs) == 2\n"
        f"loaded = [m for m in {WORKER_ONLY!r} if m in sys.modules]\n"
        "loaded += [m for m in sys.modules if m.startswith('kspark_server.operators.')]\n"
        "print('loaded:', *loaded)\n"
    )
    assert _run(code) == ["loaded:"]
