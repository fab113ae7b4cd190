"""Data safety without a server (issue 17): ids and URLs that could leak a token or escape
kspark's folders are refused, and paths are resolved on the client."""

from __future__ import annotations

import socket
import sys
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StructType

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.cli import main
from kspark.compiler import compile_topology
from kspark.compiler.specs import topic_ref as _topic_ref
from kspark.errors import (
    ConfigError,
    DeadLetterQueueProcessingExceptionHandler,
    InvalidTopologyError,
    ServerError,
)
from kspark.runtime.server import connect
from kspark.runtime.submit import load_handle, status, with_params

SECRET = "s3cret-token"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KSPARK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KSPARK_REMOTE", raising=False)
    return tmp_path / "home"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("app_id", ["a\n", "a\r\n", " a", "a\t", "a\x00", "../x", "a/b"])
def test_application_id_with_whitespace_control_chars_or_slashes_is_refused(
    app_id: str,
) -> None:
    with pytest.raises(ConfigError, match="application_id"):
        StreamsConfig(application_id=app_id)


def test_an_unknown_kafka_client_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="kafka_client") as info:
        StreamsConfig(application_id="a", kafka_client="x")  # type: ignore[arg-type]
    assert info.value.params["option"] == "kafka_client"


def test_app_id_cannot_leave_the_handles_folder(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "home" / "x.json"  # what ../x would reach from home/apps
    outside.parent.mkdir(parents=True)
    outside.write_text("{}")
    with pytest.raises(ConfigError, match="application_id"):
        load_handle("../x")
    with pytest.raises(ConfigError):
        status("../x")
    assert main(["status", "--app-id", "../x"]) == 1
    assert "KSPARK_INVALID_CONFIG" in capsys.readouterr().err


def test_a_bad_url_never_shows_its_token() -> None:
    with pytest.raises(ServerError) as info:
        with_params(f"http://spark:15002/;token={SECRET}")
    assert SECRET not in str(info.value) and "token=***" in str(info.value)
    with pytest.raises(ServerError) as info:
        connect(f"spark:15002/;token={SECRET}")
    assert SECRET not in str(info.value)


@pytest.fixture
def topology_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``module:build`` of a small topology in the working directory."""
    name = f"topo_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from kspark import StreamsBuilder, Topic\n"
        "def build():\n"
        "    b = StreamsBuilder()\n"
        "    b.stream(Topic.jsonl('in', '/in'), key_type=str, value_type=int)"
        ".to(Topic.jsonl('out', '/out'))\n"
        "    return b.build()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_topology adds the cwd
    return f"{name}:build"


def test_cli_takes_the_url_from_a_file_or_the_environment_and_never_prints_the_token(
    home: Path,
    tmp_path: Path,
    topology_ref: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = closed_port()
    url = f"sc://127.0.0.1:{port}/;token={SECRET}"
    remote_file = tmp_path / "remote"
    remote_file.write_text(url + "\n")
    session = ["--app-id", "a", "--session-id", "0d1e0000-0000-0000-0000-000000000000"]
    assert main(["status", *session, "--remote-file", str(remote_file)]) == 1
    err = capsys.readouterr().err
    # the URL of the file was used: its server is the one found unreachable
    assert "KSPARK_SERVER_UNREACHABLE" in err and str(port) in err and SECRET not in err
    monkeypatch.setenv("KSPARK_REMOTE", url)
    assert main(["stop", *session]) == 1
    err = capsys.readouterr().err
    assert "KSPARK_SERVER_UNREACHABLE" in err and str(port) in err and SECRET not in err
    assert main(["submit", topology_ref]) == 1
    err = capsys.readouterr().err
    assert "KSPARK_SERVER_UNREACHABLE" in err and SECRET not in err
    # a URL pyspark refuses is reported without its token too
    monkeypatch.setenv("KSPARK_REMOTE", f"http://127.0.0.1:{port}/;token={SECRET}")
    assert main(["submit", topology_ref]) == 1
    assert SECRET not in capsys.readouterr().err


def test_submit_needs_a_server(
    home: Path, topology_ref: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", topology_ref]) == 1
    assert "--remote-file or $KSPARK_REMOTE" in capsys.readouterr().err


@pytest.mark.parametrize("factory", [Topic.jsonl, Topic.parquet, Topic.csv])
def test_relative_and_home_topic_paths_are_resolved_on_the_client(
    factory: Callable[[str, str], Topic], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert factory("t", "data/in").path == str(tmp_path / "data" / "in")
    assert factory("t", "./in/").path == str(tmp_path / "in")
    assert factory("t", "~/in").path == str(tmp_path / "home" / "in")
    assert factory("t", "s3a://bucket/in").path == "s3a://bucket/in"
    assert factory("t", "file:/data/in").path == "file:/data/in"


def test_table_names_are_not_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Topic.table("t", "db.events").path == "db.events"
    assert Topic.table("events").path == "events"


def test_relative_and_home_checkpoint_dirs_are_resolved_on_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert StreamsConfig(application_id="a", checkpoint_dir="chk").checkpoint_dir == str(
        tmp_path / "chk"
    )
    assert StreamsConfig(application_id="a", checkpoint_dir="~/chk").checkpoint_dir == str(
        tmp_path / "home" / "chk"
    )
    assert (
        StreamsConfig(application_id="a", checkpoint_dir="hdfs://nn/chk").checkpoint_dir
        == "hdfs://nn/chk"
    )
    dlq = StreamsConfig(application_id="a", dead_letter_queue_topic=Topic.jsonl("dlq", "dlq"))
    assert dlq.dead_letter_queue_topic is not None
    assert dlq.dead_letter_queue_topic.path == str(tmp_path / "dlq")


def _two_sinks(first: Topic, second: Topic, second_type: type = int) -> StreamsBuilder:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/data/in"), key_type=str, value_type=int)
    s.filter(lambda k, v: v % 2 == 0).to(first)
    s.filter(lambda k, v: v % 2 == 1).map_values(second_type, value_type=second_type).to(second)
    return b


def test_sinks_into_one_topic_share_one_destination() -> None:
    out = compile_topology(
        _two_sinks(Topic.jsonl("out", "/data/out"), Topic.jsonl("out", "/data//out/")).build(),
        StreamsConfig(application_id="a"),
    )
    first, second = out.writer_spec.sinks
    # the batch writer writes sinks of one destination as one union (kspark_server.sinks)
    assert first.topic.destination == second.topic.destination
    refs = [_topic_ref(t) for t in (Topic.table("t", "DB.T"), Topic.table("t", "db.t"))]
    assert refs[0].destination == refs[1].destination
    kafka = [_topic_ref(Topic.kafka("k", "h:9092")), _topic_ref(Topic.kafka("k", "g:9092"))]
    assert kafka[0].destination != kafka[1].destination


def test_sinks_into_one_topic_with_other_types_or_formats_are_refused() -> None:
    with pytest.raises(InvalidTopologyError, match="same topic") as info:
        compile_topology(
            _two_sinks(
                Topic.jsonl("out", "/data/out"), Topic.jsonl("out", "/data/out"), str
            ).build(),
            StreamsConfig(application_id="a"),
        )
    assert len(info.value.params["sinks"]) == 2
    with pytest.raises(InvalidTopologyError, match="same topic"):
        compile_topology(
            _two_sinks(Topic.jsonl("out", "/data/out"), Topic.parquet("out", "/data/out")).build(),
            StreamsConfig(application_id="a"),
        )


def test_a_dead_letter_queue_on_a_sink_topic_is_refused() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/data/in"), key_type=str, value_type=int).to(
        Topic.jsonl("out", "/data/out")
    )
    config = StreamsConfig(
        application_id="a",
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/data/out/"),
    )
    with pytest.raises(ConfigError, match="dead_letter_queue_topic"):
        compile_topology(b.build(), config)


def test_submit_saves_the_handle_before_it_waits_for_the_first_batch(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while ``submit`` waits must leave a handle that finds the running query."""
    from kspark.runtime import submit as remote

    class Query:
        id = "q-1"
        runId = "r-1"
        isActive = True

    class App:
        def __init__(self, topology: object, config: StreamsConfig, session: object) -> None:
            self.query = Query()
            self.checkpoint_location = "/chk/query"

        def start(self) -> None:
            pass

        def outputs(self) -> tuple[()]:
            return ()

    class Conf:
        def set(self, key: str, value: str) -> None:
            pass

        def get(self, key: str, default: str | None = None) -> str | None:
            return default

    class Spark:
        conf = Conf()

    released: list[object] = []

    def interrupted(query: object, wait: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(remote, "check_reachable", lambda url: None)
    monkeypatch.setattr(remote, "_session", lambda url: Spark())
    monkeypatch.setattr(remote, "_release", released.append)
    monkeypatch.setattr(remote, "StreamsApp", App)
    monkeypatch.setattr(remote.shipping, "ship", lambda *a, **k: ["kspark_server"])
    monkeypatch.setattr(remote, "_wait_first_progress", interrupted)
    with pytest.raises(KeyboardInterrupt):
        remote.submit(
            _two_sinks(Topic.jsonl("a", "/a"), Topic.jsonl("b", "/b")).build(),
            StreamsConfig(application_id="payments"),
            f"sc://localhost:15002/;token={SECRET}",
        )
    saved = load_handle("payments")
    assert (saved.query_id, saved.run_id, saved.final) == ("q-1", "r-1", None)
    assert released == []  # the started query keeps running, and the handle finds it
    assert SECRET not in Path(str(saved.path)).read_text()


class FakeCatalogSpark:
    """Just enough of a session for the table checks: tables with schemas and properties."""

    def __init__(self, tables: dict[str, tuple[StructType, dict[str, str]]]) -> None:
        self.tables = tables
        self.catalog = self

    def tableExists(self, name: str) -> bool:
        return name in self.tables

    def table(self, name: str) -> Any:
        return types.SimpleNamespace(schema=self.tables[name][0])

    def sql(self, query: str) -> Any:
        name = query.removeprefix("SHOW TBLPROPERTIES ").replace("`", "")
        rows = [{"key": k, "value": v} for k, v in self.tables[name][1].items()]
        return types.SimpleNamespace(collect=lambda: rows)


def _table_app(table: str) -> Any:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/data/in"), key_type=str, value_type=int).to(
        Topic.table("out", table)
    )
    return compile_topology(b.build(), StreamsConfig(application_id="a"))


def test_a_table_sink_never_writes_into_a_table_kspark_did_not_create() -> None:
    from pyspark.sql.types import LongType, StringType

    from kspark.compiler.lowering import writer_function
    from kspark_server.sinks import TABLE_MARK, table_sink_schema

    users = StructType().add("id", LongType()).add("name", StringType())
    spark = FakeCatalogSpark({"db.users": (users, {})})
    with pytest.raises(InvalidTopologyError, match=r"db\.users exists and was not created") as e:
        writer_function(_table_app("db.users"), spark)  # type: ignore[arg-type]
    assert e.value.params["table"] == "db.users" and "id:bigint" in str(e.value)
    # kspark's own table with other columns (the sink's types changed) is refused too
    other = table_sink_schema(StringType(), StringType())
    spark = FakeCatalogSpark({"t": (other, {TABLE_MARK: "true"})})
    with pytest.raises(InvalidTopologyError, match="has the columns"):
        writer_function(_table_app("t"), spark)  # type: ignore[arg-type]
    # its own table with the sink's columns, or no table yet: the app may start
    same = table_sink_schema(StringType(), LongType())
    writer_function(_table_app("t"), FakeCatalogSpark({"t": (same, {TABLE_MARK: "true"})}))  # type: ignore[arg-type]
    writer_function(_table_app("t"), FakeCatalogSpark({}))  # type: ignore[arg-type]
