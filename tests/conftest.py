"""Shared fixtures: one Spark Connect server for the whole session."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

BLOCKER = os.path.join(os.path.dirname(__file__), "support", "blocker")
#: The tests' base chunk size (StreamsConfig's state_base_chunk_bytes is 32 MiB)
TEST_CHUNK_BYTES = 4096

# pytest runs with --doctest-modules (pyproject.toml), which imports every .py file it
# collects: keep it out of the server-side import blocker and the mypy-only typing checks.
# pytest 9 imports a conftest.py it collects for doctests as plain "conftest", which clashes
# with sdk/conftest.py, so leave this file out too (it has no examples).
collect_ignore = ["conftest.py", "support", "typing"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--spark-remote",
        default=os.environ.get("KSPARK_TEST_REMOTE"),
        help="sc://host:port of a Spark Connect server to test against (default: start one)",
    )


@pytest.fixture(autouse=True, scope="session")
def checked_state() -> Iterator[None]:
    """Every app of the suite checks its state: stateful operators check that each change
    they log reads back as the task state it stands for (``state_check_log``), and bases
    of more than a few entries span several chunks (``state_base_chunk_bytes``). A test
    that passes either field keeps its own value."""
    from kspark import StreamsConfig

    plain = StreamsConfig.__init__

    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("state_check_log", True)
        kwargs.setdefault("state_base_chunk_bytes", TEST_CHUNK_BYTES)
        plain(self, *args, **kwargs)

    StreamsConfig.__init__ = checked  # type: ignore[method-assign]
    try:
        yield
    finally:
        StreamsConfig.__init__ = plain  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def spark_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The embedded server, started with workers that cannot import kspark or the tests."""
    if request.config.getoption("--spark-remote"):
        yield None
        return
    from kspark.runtime.server import EmbeddedServer

    server = EmbeddedServer(
        conf={"spark.sql.shuffle.partitions": "2"},
        env={"PYTHONPATH": BLOCKER},
        # the tests' tables and metastore, apart from the user's ~/.kspark
        home=str(tmp_path_factory.mktemp("kspark-home")),
    ).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest, spark_server: Any) -> Iterator[Any]:
    from kspark import connect

    remote = request.config.getoption("--spark-remote")
    session = connect(remote) if remote else spark_server.session()
    yield session
    # release the session while the server is up: a client whose server is gone retries
    # the release at exit, with backoff, for minutes
    with contextlib.suppress(Exception):
        session.stop()


@pytest.fixture(scope="session")
def spark_url(request: pytest.FixtureRequest, spark_server: Any) -> str:
    """The ``sc://`` URL of the test server, with its authentication token: for tests that
    connect from other processes (``kspark submit`` and friends)."""
    remote = request.config.getoption("--spark-remote")
    return str(remote) if remote else str(spark_server.url)


@pytest.fixture
def app_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


#: Integration test files that only the extended run takes (``./run test-all``): the
#: default run (``./run test``, CI) must stay under 30 minutes on a 2-core machine.
EXTENDED_FILES = (
    "test_bad_input.py",
    # the sliding-window, cogroup and suppression operators run on Spark in CI through
    # the differential test (test_driver_engines.py); these files add restarts and stores
    "test_cogroup_on_spark.py",
    "test_crash.py",
    "test_crash_exit.py",
    "test_crash_standby.py",  # the server killed with standbys on local-cluster: 3 restarts
    "test_grouped_runner.py",  # the default runner against the other; files in the unit run
    "test_grouped_runner_faults.py",  # a clean run and two faulty ones: about 50 s
    "test_key_corpus.py",  # five apps, every stateful operator between them: about 6 minutes
    "test_notebooks.py",
    "test_rescale.py",
    "test_rescale_operators.py",  # two runs of one app with six operators: about 5 minutes
    "test_server_security.py",
    "test_sliding_on_spark.py",
    "test_standby_replicas.py",  # an executor killed on local-cluster: about a minute
    "test_standalone_server.py",
    "test_submit.py",
    "test_suppress.py",
    "test_subtopologies.py",  # several operators in one grouped runner: about 4 minutes
    "test_subtopology_dynamic.py",  # dynamic records of every shape through internal topics
    "test_subtopology_stores.py",  # three operators in one grouped runner, read each batch
    "test_warm_rescale.py",  # apps rescaled while they run
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the extended tests: whole files above, and the Hypothesis property tests that run
    # apps on Spark (each example is an app run; the operators' own property tests, with
    # hundreds of examples and no Spark, stay in the default run)
    for item in items:
        path = str(item.fspath)
        if "integration" in path and (
            path.endswith(EXTENDED_FILES) or hasattr(getattr(item, "obj", None), "hypothesis")
        ):
            item.add_marker(pytest.mark.extended)
    # integration tests share one server: run the fast plan-only tests first, and the
    # crash tests (which kill and restart the server) last. The tests that start servers of
    # their own (a standalone one, one whose workers import kspark) come first among them,
    # before the session's server starts: one Spark JVM at a time.
    items.sort(
        key=lambda item: (
            "integration" in str(item.fspath),
            not str(item.fspath).endswith(("test_standalone_server.py", "test_server_daemon.py")),
            "test_crash" in str(item.fspath),
        )
    )
