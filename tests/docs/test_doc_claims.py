"""What the manual says, checked against the code: each test reads a page (or the README,
or a notebook) and the code it describes, and fails when the two disagree."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

import kspark.errors
from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.errors import (
    ConfigError,
    DeserializationError,
    DeserializationExceptionHandler,
    ErrorHandlerContext,
    KSparkError,
    Response,
)
from kspark.runtime.app import State

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_every_error_class_is_exported_and_in_the_hierarchy_table() -> None:
    classes = {
        name
        for name, obj in vars(kspark.errors).items()
        if inspect.isclass(obj) and issubclass(obj, KSparkError)
    }
    assert classes <= set(kspark.errors.__all__)
    table = {m for m in re.findall(r"^\| `(\w+)` \| `KSPARK_", page("errors.md"), re.MULTILINE)}
    assert classes == table
    for name in classes:
        code = getattr(kspark.errors, name).code
        assert f"| `{name}` | `{code}` |" in page("errors.md")


def test_the_dead_letter_exception_class_of_a_deserialization_failure() -> None:
    label = f"{DeserializationError.__module__}.{DeserializationError.__qualname__}"
    assert f'F.lit("{label}")' in (ROOT / "sdk/kspark/compiler/lowering/corrupt.py").read_text()
    assert f"For deserialization failures, `{label}`" in page("errors.md")


def test_the_index_links_every_page_of_the_site() -> None:
    nav = re.findall(r"^  - [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    index = page("index.md")
    missing = [p for p in nav if p not in ("index.md", "api.md") and f"]({p})" not in index]
    assert missing == []


def test_the_code_links_only_pages_that_exist() -> None:
    linked = {
        (path.relative_to(ROOT), m)
        for root in ("sdk", "server_plugin")
        for path in (ROOT / root).rglob("*.py")
        for m in re.findall(r"docs/([\w-]+\.md)", path.read_text())
    }
    assert [(p, m) for p, m in sorted(linked) if not (DOCS / m).exists()] == []


def test_the_configuration_table_lists_every_field() -> None:
    text = page("configuration.md")
    missing = [a.name for a in attrs.fields(StreamsConfig) if f"| `{a.name}` |" not in text]
    assert missing == []


def test_the_quickstart_lists_every_app_state() -> None:
    text = " ".join(page("quickstart.md").split())
    listed = text[text.index("The states are") :].split(".")[0]
    assert [s.value for s in State if f"`{s.value}`" not in listed] == []


class SkipEverything(DeserializationExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        return Response.continue_()


def test_a_deserialization_handler_of_ones_own_is_refused_as_the_docs_say() -> None:
    config = StreamsConfig(
        application_id="doc-claims", deserialization_exception_handler=SkipEverything
    )
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/tmp/doc-claims/in")).to(Topic.jsonl("out", "/tmp/doc-claims/out"))
    with pytest.raises(ConfigError, match="built-in handlers"):
        compile_topology(b.build(), config)
    text = page("configuration.md")
    for line in text.splitlines():
        if line.startswith("deserialization_exception_handler ="):
            assert ":" not in line.split("#", 1)[-1], line
    assert "is refused with `ConfigError` when the app compiles" in text


@dataclasses.dataclass
class Click:
    page: str


@dataclasses.dataclass
class View:
    page: str


@dataclasses.dataclass
class Attributed:
    click: Click | None
    view: View | None


@dataclasses.dataclass
class Pair:
    click: Click | None
    view: View | None


def test_the_joins_pages_first_example_runs_and_types_every_result() -> None:
    (first, *_) = python_blocks(page("joins.md"))
    ns = {"Click": Click, "View": View, "Attributed": Attributed, "Pair": Pair}
    exec(first, ns)  # the page's own example, as written
    ns["clicks"].to("out")  # type: ignore[attr-defined]
    ends = ns["b"].build().ends  # type: ignore[attr-defined]
    assert [e.name.split("-")[1] for e in ends] == ["JOIN", "LEFTJOIN", "OUTERJOIN"]
    assert [e.value_type.display() for e in ends] == ["Attributed", "Attributed", "Pair"]


def test_the_operators_page_says_that_build_keeps_every_branch() -> None:
    text = " ".join(page("operators.md").split())
    assert "a branch that reaches no sink is kept, never dropped" in text
    assert "Topology.ends" in text


def test_joins_page_on_rescale_matches_the_rescale_test() -> None:
    text = " ".join(page("joins.md").split())
    assert "does not support stream-stream joins" not in text
    assert "moves a stream-stream join's buffered records" in text
    tests = (ROOT / "tests/integration/test_stream_join.py").read_text()
    assert "def test_rescale_keeps_the_buffered_records" in tests


def test_no_page_promises_exactly_once_into_kafka() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "at least once into Kafka" in readme
    concepts = " ".join(page("concepts.md").split())
    assert "Kafka sinks are at least once" in concepts
    assert "state store (RocksDB), one per store and task" not in concepts


def test_the_readme_says_a_replica_is_refreshed() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "keeps a client-side copy of it current" not in readme
    assert "`refresh()`" in readme


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=str)
def test_a_committed_notebook_is_one_real_run(notebook: Path) -> None:
    """notebooks/README.md says they carry a real run's outputs: every code cell ran, in
    order, top to bottom."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in cells]
    assert counts == list(range(1, len(cells) + 1)), counts


def test_the_payments_example_config_states_the_path_rule() -> None:
    text = (ROOT / "examples/payments.toml").read_text()
    assert "where the server runs" not in text
    assert "absolute against the" in text
