"""Every public DSL method and options class documents its parameters, its result and an
example, NumPy style; the examples themselves run as doctests (``--doctest-modules``)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from kspark import (
    Branched,
    BranchedKStream,
    Deduplicated,
    Joined,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    Named,
    Repartitioned,
    StreamsBuilder,
    StreamsConfig,
    Topic,
)
from kspark.dsl.options import factory

DOCUMENTED: tuple[type, ...] = (
    StreamsBuilder,
    KStream,
    KTable,
    KGroupedTable,
    BranchedKStream,
    Named,
    Branched,
    Repartitioned,
    Materialized,
    Joined,
    Deduplicated,
    StreamsConfig,
    Topic,
)

_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}\n", re.MULTILINE)


def sections(doc: str) -> dict[str, str]:
    """A NumPy docstring's sections by title, each its text up to the next title.

    >>> sections("Summary.\\n\\nParameters\\n----------\\nx\\n    An x.\\n")
    {'Parameters': 'x\\n    An x.\\n'}
    """
    found = list(_SECTION.finditer(doc))
    return {
        m.group(1): doc[m.end() : found[i + 1].start() if i + 1 < len(found) else len(doc)]
        for i, m in enumerate(found)
    }


def documented_names(section: str) -> list[str]:
    """The parameter names of a Parameters section: its unindented lines, split at commas.

    >>> documented_names("key_type, value_type\\n    Types.\\n**options\\n    Passed on.\\n")
    ['key_type', 'value_type', '**options']
    """
    names: list[str] = []
    for line in section.splitlines():
        if line and not line[0].isspace():
            names += [part.strip().split(" : ")[0] for part in line.split(",")]
    return names


def signature_names(fn: Any) -> list[str]:
    names = []
    for p in list(inspect.signature(fn).parameters.values()):
        if p.name in ("self", "cls"):
            continue
        names.append(f"**{p.name}" if p.kind is p.VAR_KEYWORD else p.name)
    return names


def public_methods(cls: type) -> Iterator[tuple[str, Any]]:
    for name, raw in vars(cls).items():
        if name.startswith("_") or isinstance(raw, property):
            continue
        if isinstance(raw, classmethod | staticmethod):
            yield name, raw.__func__
        elif isinstance(raw, factory):
            yield name, raw.__wrapped__
        elif inspect.isfunction(raw):
            yield name, raw


def _method_cases() -> list[Any]:
    return [
        pytest.param(fn, id=f"{cls.__name__}.{name}")
        for cls in DOCUMENTED
        for name, fn in public_methods(cls)
    ]


@pytest.mark.parametrize("fn", _method_cases())
def test_public_method_has_parameters_returns_and_an_example(fn: Any) -> None:
    doc = inspect.getdoc(fn) or ""
    found = sections(doc)
    params = signature_names(fn)
    if params:
        assert "Parameters" in found, f"{fn.__qualname__}: no Parameters section"
        assert sorted(documented_names(found["Parameters"])) == sorted(params), (
            f"{fn.__qualname__}: the Parameters section does not name {params}"
        )
    assert "Returns" in found, f"{fn.__qualname__}: no Returns section"
    assert "Examples" in found and ">>>" in found["Examples"], f"{fn.__qualname__}: no example"


@pytest.mark.parametrize("cls", DOCUMENTED, ids=lambda c: c.__name__)
def test_public_class_has_an_example_and_documents_its_fields(cls: type) -> None:
    found = sections(inspect.getdoc(cls) or "")
    assert "Examples" in found and ">>>" in found["Examples"], f"{cls.__name__}: no example"
    if attrs.has(cls):
        fields = [a.name for a in attrs.fields(cls) if a.init]
        assert sorted(documented_names(found.get("Parameters", ""))) == sorted(fields), (
            f"{cls.__name__}: the Parameters section does not name its fields {fields}"
        )


@pytest.mark.parametrize(
    "prop",
    [
        pytest.param(raw, id=f"{cls.__name__}.{name}")
        for cls in DOCUMENTED
        for name, raw in vars(cls).items()
        if isinstance(raw, property) and not name.startswith("_")
    ],
)
def test_public_property_has_a_docstring(prop: property) -> None:
    assert prop.__doc__, "a public property says what it is"


def test_the_checks_catch_a_method_without_sections() -> None:
    def undocumented(self: object, x: int) -> int:
        """Just a summary."""
        return x

    with pytest.raises(AssertionError, match="no Parameters section"):
        test_public_method_has_parameters_returns_and_an_example(undocumented)
