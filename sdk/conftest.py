"""pytest collects the docstring examples of ``sdk/kspark`` (``--doctest-modules`` in
pyproject.toml). The modules below need a Spark Connect server, or start one, so their
examples are not run: they are marked ``# doctest: +SKIP`` or are command-line code.
This file itself is left out because every ``conftest.py`` outside a package imports as
the module ``conftest``, and the doctest collector would clash with tests/conftest.py."""

from __future__ import annotations

collect_ignore = [
    "conftest.py",
    "kspark/runtime",
    "kspark/testing",
    "kspark/demo",
    "kspark/cli.py",
]
