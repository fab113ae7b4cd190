"""describe(), Mermaid, DOT and SVG with processor names that hold syntax characters."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from kspark import Named, StreamsBuilder, Topic
from kspark.plan import render
from kspark.plan.topology import Topology

NASTY = [
    'say "hi"',
    "a[b](c){d}",
    "x --> y",
    "two\nlines",
    "zürich-€-日本",
    "a<b>&c",
    "back\\slash",
    "end",
    "o-ring",
]


def _topology(*names: str) -> Topology:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    for name in names:
        s = s.filter(lambda k, v: True, Named.as_(name))
    s.to(Topic.jsonl("out", "/tmp/out"))
    return b.build()


def test_mermaid_ids_are_injective() -> None:
    names = ["a-b", "a_b", "a b", "a__b", "a_2d_b", "a", "_", "__", "ab"]
    ids = [render._mermaid_id(name) for name in names]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"n[A-Za-z0-9_]*", i) for i in ids)


def test_a_b_and_a_underscore_b_are_two_boxes_in_mermaid() -> None:
    text = _topology("a-b", "a_b").to_mermaid()
    boxes = [
        line for line in text.splitlines() if line.strip().startswith("n") and "-->" not in line
    ]
    assert len(boxes) == 4  # source, two filters, sink


@pytest.mark.parametrize("name", NASTY)
def test_mermaid_labels_hold_no_syntax(name: str) -> None:
    text = _topology(name).to_mermaid()
    (line,) = [ln for ln in text.splitlines() if render._mermaid_id(name) + '["' in ln]
    label = line.split('["', 1)[1].rsplit('"]', 1)[0]
    assert '"' not in label and "-->" not in label and "[" not in label and "\n" not in label
    edges = [ln for ln in text.splitlines() if "-->" in ln]
    assert len(edges) == 2 and all(re.fullmatch(r"\s+n\w* --> n\w*", e) for e in edges)


@pytest.mark.parametrize("name", NASTY)
def test_dot_quotes_names(name: str) -> None:
    text = _topology(name).to_dot()
    quoted = render._dot_string(name)
    assert f"{quoted} [shape=box, label={quoted}];" in text
    # every quote inside a DOT string is escaped: strip the strings, no quote is left
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', "", text)
    assert '"' not in outside and "\n" not in quoted


def test_dot_strings_are_injective() -> None:
    names = ["a\\nb", "a\nb", 'a\\"b', 'a"b', "a\\\\b"]
    assert len({render._dot_string(name) for name in names}) == len(names)


@pytest.mark.parametrize("name", [*NASTY, "bell\x07"])
def test_svg_is_well_formed_and_shows_the_name(name: str) -> None:
    svg = _topology(name).to_svg()
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert render._shown(name) in texts


def test_describe_shows_names_as_they_are() -> None:
    assert "Processor: x --> y (stores: [])" in _topology("x --> y").describe()
