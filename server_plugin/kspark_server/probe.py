"""The worker check's probe: what the server's Python workers can import.

kspark runs :func:`probe` once per session in a plain (pickled, not Arrow) Python UDF, so
that it runs on a worker that lacks pyarrow or pandas too, and reports what it found.
Standard library only, like the rest of ``kspark_server``.

Examples
--------
>>> import json
>>> found = json.loads(probe(json.dumps([["json", "json"], ["no_such_mod_x", "nope"]])))
>>> found["modules"]["json"]["error"] is None
True
>>> found["modules"]["no_such_mod_x"]["error"]
"ModuleNotFoundError: No module named 'no_such_mod_x'"
"""

from __future__ import annotations

__all__ = ["probe"]


def probe(modules: str) -> str:
    """Import each module and report the worker's Python and what it found, as JSON.

    Parameters
    ----------
    modules
        JSON: a list of ``[module, distribution]`` pairs.

    Returns
    -------
    str
        JSON: ``{"python": version, "executable": path, "modules": {module: {"version":
        str or None, "error": str or None}}}``.
    """
    # imported here: the function is pickled by value and runs in a fresh worker
    import importlib
    import importlib.metadata
    import json
    import sys

    found: dict[str, dict[str, str | None]] = {}
    for module, distribution in json.loads(modules):
        try:
            imported = importlib.import_module(module)
        except Exception as exc:  # a broken install raises more than ImportError
            found[module] = {"version": None, "error": f"{type(exc).__name__}: {exc}"}
            continue
        try:
            version: str | None = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(imported, "__version__", None)
        found[module] = {"version": version, "error": None}
    return json.dumps(
        {"python": sys.version.split()[0], "executable": sys.executable, "modules": found}
    )
