"""Which pyspark distribution kspark runs on: the thin client or full pyspark.

kspark installs no pyspark by itself: ``pip install 'kspark[client]'`` brings
``pyspark-client`` (the pure Python Spark Connect client, no JVM jars) and
``pip install 'kspark[local]'`` brings full ``pyspark[connect]`` (with the jars that the
embedded server needs). Both distributions install the same import package ``pyspark``,
so only one of them may be in an environment; pip does not prevent installing both, and
then the one installed last overwrites the other's files (see docs/deployment.md).

Examples
--------
>>> from kspark._deps import pyspark_distribution
>>> pyspark_distribution() in ("pyspark", "pyspark-client", None)
True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import warnings

from kspark.errors import MissingDependencyError

__all__ = ["INSTALL_HINT", "check_pyspark", "has_spark_jars", "pyspark_distribution"]

INSTALL_HINT = (
    "pip install 'kspark[client]' (the pure Python Spark Connect client, for a remote server: "
    "kspark.connect('sc://host:port')) or pip install 'kspark[local]' (full pyspark with its "
    "JVM jars, for the embedded server that kspark.connect() starts)"
)


def _pyspark_dir() -> str | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return os.path.dirname(os.path.realpath(spec.origin))


def _owner_dirs() -> dict[str, str]:
    """``{distribution name: its pyspark directory}`` for the installed pyspark dists."""
    out: dict[str, str] = {}
    for name in ("pyspark", "pyspark-client"):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        out[name] = os.path.realpath(str(dist.locate_file("pyspark")))
    return out


def pyspark_distribution() -> str | None:
    """The distribution that provides the ``pyspark`` that imports, or None.

    ``"pyspark"`` (full, with jars), ``"pyspark-client"`` (the thin client) or None when
    no distribution owns it (for example a Spark installation on ``PYTHONPATH``).
    """
    home = _pyspark_dir()
    if home is None:
        return None
    owners = [name for name, path in _owner_dirs().items() if path == home]
    if "pyspark-client" in owners:
        # when both own the directory, pyspark-client was installed last (pip's order)
        return "pyspark-client"
    return owners[0] if owners else None


def has_spark_jars(home: str | None = None) -> bool:
    """Whether ``home`` (default: the installed pyspark) can run a Spark JVM."""
    home = home or _pyspark_dir()
    return (
        bool(home)
        and os.path.isfile(os.path.join(str(home), "bin", "spark-submit"))
        and (os.path.isdir(os.path.join(str(home), "jars")))
    )


def check_pyspark() -> None:
    """Fail with the install command when no pyspark imports; warn on a mixed install.

    Raises
    ------
    MissingDependencyError
        When no ``pyspark`` package can be imported.
    """
    home = _pyspark_dir()
    if home is None:
        raise MissingDependencyError(
            f"kspark needs a Spark Connect client and no pyspark is installed: {INSTALL_HINT}",
            package="pyspark",
        )
    owners = [name for name, path in _owner_dirs().items() if path == home]
    if len(owners) == 2:
        warnings.warn(
            f"both pyspark and pyspark-client are installed into {home}: they share those "
            "files, so the one installed last has overwritten the other (its Python files "
            "may not match the JVM jars). Keep one: pip uninstall -y pyspark pyspark-client, "
            "then pip install 'kspark[local]' or 'kspark[client]'",
            RuntimeWarning,
            stacklevel=3,
        )


# kspark/__init__.py imports this module first, so that a missing pyspark is reported with
# the install command before any other module fails on ``import pyspark``.
check_pyspark()
