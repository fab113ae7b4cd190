"""Which modules kspark pickles by value for the demo app."""

from __future__ import annotations


def test_the_demo_app_is_shipped_by_value() -> None:
    """``kspark_demo`` is user code like any other: a server that cannot import it (the
    notebooks' test server) must get its functions and types by value."""
    from kspark.runtime.shipping import modules_to_ship
    from kspark_demo.app import build_topology

    shipped = modules_to_ship(build_topology())
    assert "kspark_demo" in shipped
    assert not any(m.startswith(("kspark.dsl", "kspark.plan", "kspark.runtime")) for m in shipped)
