"""The small app package that the submit tests ship to the server: a topology module whose
mapper calls a sibling module, so it runs only if the whole package is shipped."""

from __future__ import annotations

from pathlib import Path

TOPOLOGY = """
from __future__ import annotations

import dataclasses

from kspark import StreamsBuilder, Topic

from {pkg}.helpers import shout


@dataclasses.dataclass
class Event:
    id: str
    user: str
    text: str
    ts: int


def build():
    b = StreamsBuilder()
    (
        b.stream(
            Topic.jsonl("events", {inp!r}, layout="value", key_field="user", timestamp_field="ts"),
            key_type=str, value_type=Event,
        )
        .map_values(lambda e: shout(e.text), value_type=str)
        .to(Topic.jsonl("shouts", {out!r}))
    )
    return b.build()
"""

HELPERS = """
def shout(text: str) -> str:
    return text.upper() + "!"
"""


def write_project(root: Path, pkg: str, data: Path) -> None:
    """Package ``pkg`` under ``root`` (``topo.build`` and ``helpers``), reading
    ``data/in`` and writing ``data/out``."""
    (root / pkg).mkdir(parents=True)
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "helpers.py").write_text(HELPERS)
    (root / pkg / "topo.py").write_text(
        TOPOLOGY.format(pkg=pkg, inp=str(data / "in"), out=str(data / "out"))
    )


NAMES_TOPOLOGY = """
from __future__ import annotations

import dataclasses

from kspark import StreamsBuilder

from {pkg}.helpers import shout


@dataclasses.dataclass
class Event:
    id: str
    user: str
    text: str
    ts: int


def build():
    # names only, and a lambda without types: the --config file binds both names, and
    # gives "events" its layout and types
    b = StreamsBuilder()
    b.stream("events").map_values(lambda e: shout(e.text)).to("shouts")
    return b.build()
"""


def write_names_project(root: Path, pkg: str) -> None:
    """Package ``pkg`` under ``root`` whose topology (``topo.build``) only names its
    topics, ``events`` and ``shouts``; ``topo.Event`` is the events' record type."""
    (root / pkg).mkdir(parents=True)
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "helpers.py").write_text(HELPERS)
    (root / pkg / "topo.py").write_text(NAMES_TOPOLOGY.format(pkg=pkg))
