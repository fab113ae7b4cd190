"""The Python daemon of kspark's servers: pyspark's own, with the stateful operators'
modules imported before it forks a worker.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``, by
default ``pyspark.daemon``) and forks every Python worker from it. A worker of pyspark's
daemon imports pyspark's worker, pandas, pyarrow and kspark's operators itself: about
0.9 s before its first task, paid by each worker that a query's first batch starts. The
workers of this daemon inherit them, already imported.

Each import that fails here is left to the worker, which imports the module itself and
reports the failure where it needs it (kspark's worker check names a missing package);
the daemon notes it on its standard error (the server's log) and starts anyway. The
daemon's standard output carries its port to Spark, so nothing is printed there.

Fork safety: numpy's BLAS and pyarrow's allocator start threads when imported, and both
register the fork handlers that make a fork after their import safe (Python's own
``multiprocessing`` forks after them on Linux by default).

``python -m kspark_server.daemon --check`` imports this module and pyspark's daemon and
exits: kspark's servers run it with the workers' Python and environment before they name
this module in ``spark.python.daemon.module`` (docs/design/server-settings.md).
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["PRELOADED", "main", "preload"]

#: What a worker of a kspark operator imports before its first record, heaviest first.
#: ``kspark_server.operators.grouped`` imports every operator (through their registry).
PRELOADED = (
    "pandas",
    "pyarrow",
    "pyarrow.compute",
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.conversion",
    "kspark_server.operators.grouped",
    "kspark_server.localstore",
)

CHECK_FLAG = "--check"


def preload(names: tuple[str, ...] = PRELOADED) -> dict[str, str]:
    """Import ``names``; return the failures, module name to the error's text.

    Examples
    --------
    >>> preload(("json", "no_such_module_anywhere"))
    {'no_such_module_anywhere': "ModuleNotFoundError: No module named 'no_such_module_anywhere'"}
    """
    failed: dict[str, str] = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # any failure: the worker imports the module itself
            failed[name] = f"{type(e).__name__}: {e}"
    return failed


def main(argv: list[str]) -> int:
    """Preload, then run pyspark's daemon, which reads the worker module from ``argv``;
    with ``--check``, only import pyspark's daemon."""
    if argv[1:2] == [CHECK_FLAG]:
        importlib.import_module("pyspark.daemon")
        return 0
    failed = preload()
    for name, error in failed.items():
        print(
            f"kspark daemon: {name} not imported before fork ({error}); "
            "the workers import it themselves",
            file=sys.stderr,
        )
    from pyspark import daemon

    daemon.manager()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
