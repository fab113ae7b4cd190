"""The compiler's rules, one module per kind of node: :mod:`.base` (the shared core and
the sources), :mod:`.stateless`, :mod:`.joins` and :mod:`.stateful`."""
