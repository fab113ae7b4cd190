"""pytest collects the docstring examples of every module of ``sdk/kspark``
(``--doctest-modules`` in pyproject.toml). An example that needs a Spark Connect server
is marked ``# doctest: +SKIP``, so the examples that need none run everywhere.
This file itself is left out because every ``conftest.py`` outside a package imports as
the module ``conftest``, and the doctest collector would clash with tests/conftest.py."""

from __future__ import annotations

collect_ignore = ["conftest.py"]
