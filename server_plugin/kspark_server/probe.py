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

__all__ = ["code_fingerprint", "probe"]


def code_fingerprint(package_dir: str) -> str:
    """A digest of the Python sources under ``package_dir`` (their paths and contents).

    The client compares the workers' ``kspark_server`` with its own: the same digest, and
    the operators travel by reference (a few bytes per function in each query's plan);
    another, or none, and they travel by value, as the client's code.

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "a.py"), "w") as f:
    ...     _ = f.write("x = 1")
    >>> before = code_fingerprint(d)
    >>> with open(os.path.join(d, "a.py"), "w") as f:
    ...     _ = f.write("x = 2")
    >>> before == code_fingerprint(d), len(before)
    (False, 64)
    """
    # imported here: the function runs in a worker, pickled by value with the probe
    import hashlib
    import os

    digest = hashlib.sha256()
    for root, dirs, names in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, package_dir).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read() + b"\0")
    return digest.hexdigest()


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
        str or None, "error": str or None}}, "kspark_server": digest or None}``, the
        digest (:func:`code_fingerprint`) of the worker's own ``kspark_server``, if it
        has one.
    """
    # imported here: the function is pickled by value and runs in a fresh worker
    import importlib
    import importlib.metadata
    import importlib.util
    import json
    import os
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
    try:
        # the worker's own installation, not the by-value copy this function came with
        spec = importlib.util.find_spec("kspark_server")
        origin = spec.origin if spec is not None else None
        own = code_fingerprint(os.path.dirname(origin)) if origin else None
    except Exception:  # no kspark_server, or an unreadable one: ship it by value
        own = None
    return json.dumps(
        {
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "modules": found,
            "kspark_server": own,
        }
    )
