"""The worker check: before an app's query starts, one probe job on the server's workers.

A Python worker that lacks a package fails far from its cause: ``Python worker failed to
connect back`` for a missing ``grpc``, a traceback cut short for a missing
``confluent_kafka``, with the cause only in the server's log. So before the query starts,
:func:`check` runs :func:`kspark_server.probe.probe` in one small job (a plain pickled
Python UDF, which needs neither pyarrow nor pandas on the worker), which imports each
module the plan needs and reports its version. A miss is one :class:`~kspark.errors.ServerError`
that names every missing or wrong package, the worker's Python, and the ``pip install``
that fixes it; no query is started. The check runs once per session (and again only for
modules a later plan adds).

What a plan needs:

- always: pyarrow, pandas, numpy, and what pyspark's Spark Connect worker imports
  (grpcio, grpcio-status, protobuf, googleapis-common-protos, zstandard);
- a stateful operator: msgspec and lmdb (the state encoding and the local state store);
- a Kafka topic read or written through kspark's Python source and sink: confluent-kafka.

The versions required are kspark's own requirements (its installed metadata) and those of
the installed pyspark's ``connect`` extra.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from kspark.compiler import stages as st
from kspark.errors import ServerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kspark.config import StreamsConfig

__all__ = ["Need", "WorkerReport", "check", "needs", "problems", "requirements"]


@attrs.frozen
class Need:
    """A module the workers must import, and the distribution that provides it."""

    module: str
    distribution: str


BASE = (
    Need("pyarrow", "pyarrow"),
    Need("pandas", "pandas"),
    Need("numpy", "numpy"),
    # pyspark's Spark Connect worker: without grpc it fails with "Python worker failed to
    # connect back" (issue 21)
    Need("grpc", "grpcio"),
    Need("grpc_status", "grpcio-status"),
    Need("google.protobuf", "protobuf"),
    Need("google.rpc", "googleapis-common-protos"),
    Need("zstandard", "zstandard"),
)
STATEFUL = (Need("msgspec", "msgspec"), Need("lmdb", "lmdb"))
KAFKA = (Need("confluent_kafka", "confluent-kafka"),)


def needs(output: st.Output, *, python_kafka: bool) -> tuple[Need, ...]:
    """The modules the workers must import to run ``output``.

    Parameters
    ----------
    output
        The compiled app.
    python_kafka
        Whether the app's Kafka topics go through kspark's Python source and sink.

    Examples
    --------
    >>> from kspark_server.spec import SinksSpec
    >>> empty = st.Output(sinks=(), writer_spec=SinksSpec(), stores={})
    >>> [n.module for n in needs(empty, python_kafka=True)][:3]
    ['pyarrow', 'pandas', 'numpy']
    """
    out = list(BASE)
    stages = output.stages()
    if any(isinstance(s, st.Stateful) for s in stages):
        out += STATEFUL
    if python_kafka and has_kafka_topic(output):
        out += KAFKA
    return tuple(out)


def has_kafka_topic(output: st.Output) -> bool:
    """Whether the app reads or writes a Kafka topic (its dead-letter topic included)."""
    reads = [s.topic.format for s in output.stages() if isinstance(s, st.Read)]
    writes: list[str] = [part.topic.format for part in output.sinks]
    for d in output.writer_spec.dynamic:
        rule = d.rule
        writes += [t.format for t in (*rule.explicit, rule.default) if t is not None]
    dlq = output.writer_spec.dlq
    return "kafka" in reads + writes or (dlq is not None and dlq.format == "kafka")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _both(a: str, b: str) -> str:
    """Two specifiers that must both hold, as one."""
    return ",".join(x for x in (a, b) if x)


_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*"
    r"(?:;\s*(?P<marker>.*))?$"
)
_EXTRA = re.compile(r"""^extra\s*==\s*["']([^"']+)["']$""")


def parse_requirements(lines: Iterable[str], extras: Iterable[str]) -> dict[str, str]:
    """``{distribution: specifier}`` of the requirement lines that apply without an extra
    or under one of ``extras``.

    Examples
    --------
    >>> parse_requirements(['pandas<3,>=2.2', 'grpcio>=1.76.0; extra == "connect"',
    ...                     'pytest>=8; extra == "dev"'], ["connect"])
    {'pandas': '<3,>=2.2', 'grpcio': '>=1.76.0'}
    """
    wanted = set(extras)
    out: dict[str, str] = {}
    for line in lines:
        m = _REQUIREMENT.match(line)
        if m is None:
            continue
        marker = (m["marker"] or "").strip()
        if marker:
            extra = _EXTRA.match(marker)
            if extra is None or extra[1] not in wanted:
                continue
        name = _normal(m["name"])
        out[name] = _both(out.get(name, ""), m["spec"].replace(" ", ""))
    return out


def requirements() -> dict[str, str]:
    """The version specifiers kspark and the installed pyspark's ``connect`` extra require."""
    out: dict[str, str] = {}
    for dist, extras in (("pyspark", ("connect",)), ("pyspark-client", ()), ("kspark", ("kafka",))):
        try:
            lines = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for name, spec in parse_requirements(lines, extras).items():
            out[name] = _both(out.get(name, ""), spec)
    return out


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group().split(".")) if m else ()


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets every clause of ``specifier`` (release numbers only).

    Examples
    --------
    >>> satisfies("2.2.3", ">=2.2,<3"), satisfies("3.0.0", ">=2.2,<3"), satisfies("1.76", ">=1.76.0")
    (True, False, True)
    """
    have = _release(version)
    for clause in filter(None, specifier.split(",")):
        m = re.match(r"(~=|==|!=|>=|<=|>|<)(.+)", clause.strip())
        if m is None:
            continue
        op, want_text = m.groups()
        if want_text.endswith(".*"):  # ==1.2.* and !=1.2.*: a prefix
            prefix = _release(want_text[:-2])
            if (have[: len(prefix)] == prefix) != (op == "=="):
                return False
            continue
        want = _release(want_text)
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {
            ">=": a >= b,
            "~=": a >= b,
            ">": a > b,
            "<=": a <= b,
            "<": a < b,
            "==": a == b,
            "!=": a != b,
        }[op]
        if not ok:
            return False
    return True


@attrs.frozen
class WorkerReport:
    """What the probe found on a worker."""

    python: str
    executable: str
    #: module -> (version or None, import error or None)
    modules: Mapping[str, tuple[str | None, str | None]]
    #: the digest of the worker's own ``kspark_server``
    #: (:func:`kspark_server.probe.code_fingerprint`); None: it has none
    kspark_server: str | None = None

    @classmethod
    def from_json(cls, text: str) -> WorkerReport:
        data = json.loads(text)
        return cls(
            python=data["python"],
            executable=data["executable"],
            modules={m: (v["version"], v["error"]) for m, v in data["modules"].items()},
            kspark_server=data.get("kspark_server"),
        )


def problems(
    report: WorkerReport, wanted: Iterable[Need], required: Mapping[str, str]
) -> list[tuple[Need, str]]:
    """Each needed module the worker lacks or has in a version kspark cannot use, with why.

    Examples
    --------
    >>> r = WorkerReport("3.11.9", "/venv/bin/python",
    ...                  {"grpc": (None, "ModuleNotFoundError: No module named 'grpc'"),
    ...                   "pandas": ("2.1.0", None), "numpy": ("2.0.0", None)})
    >>> for need, why in problems(r, [Need("grpc", "grpcio"), Need("pandas", "pandas"),
    ...                               Need("numpy", "numpy")], {"pandas": ">=2.2,<3"}):
    ...     print(need.module, "|", why)
    grpc | ModuleNotFoundError: No module named 'grpc'
    pandas | pandas 2.1.0 is installed; kspark needs pandas>=2.2,<3
    """
    out = []
    for need in wanted:
        version, error = report.modules.get(need.module, (None, "not checked"))
        spec = required.get(_normal(need.distribution), "")
        if error is not None:
            out.append((need, error))
        elif spec and version is not None and not satisfies(version, spec):
            out.append(
                (
                    need,
                    f"{need.distribution} {version} is installed; kspark needs "
                    f"{need.distribution}{spec}",
                )
            )
    return out


def failure_message(
    report: WorkerReport, found: list[tuple[Need, str]], required: Mapping[str, str]
) -> str:
    """The message of the :class:`ServerError` for the ``found`` problems."""
    lines = [f"  - {need.module} ({need.distribution}): {why}" for need, why in found]
    packages = " ".join(
        f"'{need.distribution}{required.get(_normal(need.distribution), '')}'" for need, _ in found
    )
    return (
        "the Spark server's Python workers cannot run this app; no query was started:\n"
        + "\n".join(lines)
        + f"\nworker Python: {report.executable} (Python {report.python}).\n"
        f"Fix: {report.executable} -m pip install {packages} on every worker machine, or "
        "start the server with a worker Python that has them (kspark server start "
        "--worker-python PATH, or PYSPARK_PYTHON); see docs/deployment.md"
    )


#: Per session: the modules its workers are known to import (weak keys, as in
#: ``kspark.compiler.lowering.kafka``: an entry goes with its session).
_CHECKED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()
#: Per session: whether its workers have this client's very ``kspark_server``
_SAME_CODE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


@functools.cache  # the client's sources do not change while it runs
def client_fingerprint() -> str:
    """The digest of this client's ``kspark_server`` (:func:`kspark_server.probe.code_fingerprint`)."""
    import kspark_server
    from kspark_server.probe import code_fingerprint

    return code_fingerprint(os.path.dirname(kspark_server.__file__))


def same_server_code(spark: SparkSession) -> bool:
    """Whether the workers of ``spark`` import the very ``kspark_server`` this client has
    (known after :func:`check`): then the operators can travel by reference."""
    return _SAME_CODE.get(spark, False)


def run_probe(spark: SparkSession, wanted: Iterable[Need]) -> WorkerReport:
    """Run the probe in one task on the server's workers."""
    from pyspark import cloudpickle
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    from kspark_server import probe as probe_module
    from kspark_server.probe import probe

    # by value, the probe's module alone (standard library only): the workers need not
    # have kspark, and the check runs before any bundle (kspark.compiler.bundle)
    cloudpickle.register_pickle_by_value(probe_module)  # type: ignore[no-untyped-call]
    payload = json.dumps([[n.module, n.distribution] for n in wanted])
    # a plain pickled UDF: it runs on a worker that lacks pyarrow or pandas too. Its type
    # as an object: a DDL string would be parsed through the active session, which a
    # session the app was given need not be
    fn = F.udf(probe, StringType(), useArrow=False)
    row = spark.range(1).select(fn(F.lit(payload)).alias("report")).collect()[0]
    return WorkerReport.from_json(row["report"])


def check(spark: SparkSession, output: st.Output, config: StreamsConfig) -> None:
    """Check that the server's workers can import what ``output`` needs (once per session).

    Raises
    ------
    ServerError
        Naming each missing or unusable package, the worker's Python and the fix; or, when
        the probe itself cannot run, its cause.
    """
    python_kafka = False
    if has_kafka_topic(output):
        from kspark.compiler.lowering import kafka_format

        python_kafka = kafka_format(spark, config.kafka_client) == "kspark_kafka"
    wanted = needs(output, python_kafka=python_kafka)
    known = _CHECKED.get(spark, frozenset())
    todo = [n for n in wanted if n.module not in known]
    if not todo:
        return
    try:
        report = run_probe(spark, todo)
    except Exception as exc:
        from kspark.runtime.failures import root_cause

        raise ServerError(
            "the worker check could not run a Python worker on the Spark server; no query "
            f"was started: {root_cause(exc)}",
        ) from exc
    required = requirements()
    found = problems(report, todo, required)
    if found:
        raise ServerError(
            failure_message(report, found, required),
            missing=[need.distribution for need, _ in found],
            python=report.executable,
            python_version=report.python,
        )
    _CHECKED[spark] = known | {n.module for n in todo}
    if spark not in _SAME_CODE:
        _SAME_CODE[spark] = report.kspark_server == client_fingerprint()
