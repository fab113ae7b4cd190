"""Which modules kspark pickles by value for the demo app."""

from __future__ import annotations


def test_the_demo_app_is_shipped_by_value() -> None:
    """``kspark.demo`` is user code inside the package: a server that cannot import kspark
    (the notebooks' test server) must get its functions and types by value."""
    from kspark.demo.app import build_topology
    from kspark.runtime.shipping import modules_to_ship

    shipped = modules_to_ship(build_topology("/unused"))
    assert "kspark.demo.app" in shipped
    assert not any(m.startswith(("kspark.dsl", "kspark.plan", "kspark.runtime")) for m in shipped)
