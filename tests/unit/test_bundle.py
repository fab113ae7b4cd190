"""kspark_server in bundles (kspark.compiler.bundle, kspark.compiler.bootstrap): what a function carries to
workers that lack the client's kspark_server, and how a worker installs it."""

from __future__ import annotations

import ast
import json
import lzma
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import cloudpickle

import kspark
import kspark_server
from kspark.compiler import bootstrap as _bootstrap
from kspark.compiler import bundle as _bundle

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = ROOT / "tests" / "support" / "blocker"


@pytest.fixture(autouse=True)
def _by_value() -> Iterator[None]:
    before = _bundle.by_value()
    _bundle.set_by_value(True)
    try:
        yield
    finally:
        _bundle.set_by_value(before)


@pytest.fixture()
def clean_worker() -> Iterator[None]:
    """This process as a worker: no bundle finder, kspark_server's modules restored after."""
    saved = {m: v for m, v in sys.modules.items() if m.split(".")[0] == "kspark_server"}
    meta = list(sys.meta_path)
    try:
        yield
    finally:
        sys.meta_path[:] = meta
        for m in [m for m in sys.modules if m.split(".")[0] == "kspark_server"]:
            del sys.modules[m]
        sys.modules.update(saved)


def _worker(code: str, *blobs: bytes, tmp: Path) -> str:
    """Run ``code`` in a fresh interpreter that cannot import kspark nor kspark_server (as
    the test server's workers), the pickles in ``blobs`` in files ``p0``, ``p1``, ..."""
    for i, blob in enumerate(blobs):
        (tmp / f"p{i}").write_bytes(blob)
    site = str(Path(cloudpickle.__file__).parents[2])  # pyspark's site-packages
    env = {"PYTHONPATH": f"{BLOCKER}{os.pathsep}{site}", "PATH": os.environ.get("PATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _docless(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0].value.value = ""
    return ast.dump(tree)


def test_the_bundled_sources_are_the_packages_code_on_the_same_lines() -> None:
    top = Path(kspark_server.__file__).parent
    found = _bundle.sources()
    files = sorted(top.rglob("*.py"))
    assert len(found) == len(files) > 50
    for path in files:
        rel = path.relative_to(top.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        original = path.read_text(encoding="utf-8")
        is_package, stripped = found[name]
        assert is_package == (rel.name == "__init__")
        assert _docless(ast.parse(stripped)) == _docless(ast.parse(original)), name
        assert len(stripped.splitlines()) == len(original.splitlines()), name
        assert "#" not in stripped or len(stripped) < len(original)
    whole = _bundle._bundle(frozenset(found))[1]
    assert len(whole) < 120_000  # the whole package, compressed


def test_a_function_carries_only_the_modules_it_needs() -> None:
    from kspark_server.transport import arrow_schema

    payload = cloudpickle.dumps(arrow_schema)  # type: ignore[no-untyped-call]
    _key, blob = _bundle.bundle_for(payload)
    modules = json.loads(lzma.decompress(blob))
    assert "kspark_server" in modules and "kspark_server.transport" in modules
    assert "kspark_server.operators.dedup" not in modules
    # the closure: what transport imports, at its top or in a function
    assert set(modules) == _bundle.closure({"kspark_server", "kspark_server.transport"})
    assert len(cloudpickle.dumps(_bundle.shipped(arrow_schema))) < 20_000  # type: ignore[no-untyped-call]


def test_by_reference_a_shipped_function_is_the_function_itself() -> None:
    from kspark_server.transport import arrow_schema

    _bundle.set_by_value(False)
    blob = cloudpickle.dumps(_bundle.shipped(arrow_schema))  # type: ignore[no-untyped-call]
    assert len(blob) < 200
    assert pickle.loads(blob) is arrow_schema


def test_a_worker_without_kspark_runs_a_bundled_function_and_its_submodules(
    tmp_path: Path,
) -> None:
    from kspark_server.operators.registry import make_operator
    from kspark_server.transport import arrow_schema

    fn = cloudpickle.dumps(_bundle.shipped(arrow_schema))  # type: ignore[no-untyped-call]
    # the operators' factory: a package's submodules, imported in functions too
    registry = cloudpickle.dumps(_bundle.shipped(make_operator))  # type: ignore[no-untyped-call]
    out = _worker(
        "import pickle, sys\n"
        "f = pickle.loads(open('p0', 'rb').read())\n"
        "import kspark_server.transport as t, kspark_server.contract.parts as parts\n"
        "g = pickle.loads(open('p1', 'rb').read())\n"
        "import kspark_server.operators.dedup as dedup\n"
        "print(f is t.arrow_schema, f.__module__, g.__module__, parts.__name__, dedup.__name__)\n"
        "try:\n"
        "    import kspark\n"
        "except ImportError:\n"
        "    print('no kspark')\n",
        fn,
        registry,
        tmp=tmp_path,
    )
    assert out.splitlines() == [
        "True kspark_server.transport kspark_server.operators.registry "
        "kspark_server.contract.parts kspark_server.operators.dedup",
        "no kspark",
    ]


def test_a_worker_installs_a_digests_bundle_once(clean_worker: None) -> None:
    sources = {"kspark_server": (True, "calls = []\n"), "kspark_server.a": (False, "X = 1\n")}
    blob = lzma.compress(json.dumps(sources).encode())
    for m in [m for m in sys.modules if m.split(".")[0] == "kspark_server"]:
        del sys.modules[m]
    _bootstrap.install("k1", "d" * 64, blob)
    import kspark_server.a as a  # type: ignore[import-not-found]

    first = sys.modules["kspark_server"]
    assert a.X == 1 and not hasattr(first, "__file__")
    finders = [f for f in sys.meta_path if hasattr(f, "kspark_bundle_digest")]
    assert len(finders) == 1
    # the same key again: nothing decompressed (a corrupt blob would fail), nothing purged
    _bootstrap.install("k1", "d" * 64, b"not lzma")
    assert sys.modules["kspark_server"] is first
    # another bundle of the digest adds its modules, the loaded ones stay
    more = {"kspark_server.b": (False, "Y = 2\n")}
    _bootstrap.install("k2", "d" * 64, lzma.compress(json.dumps(more).encode()))
    import kspark_server.b as b  # type: ignore[import-not-found]

    assert b.Y == 2 and sys.modules["kspark_server"] is first
    assert [f for f in sys.meta_path if hasattr(f, "kspark_bundle_digest")] == finders


def test_a_bundle_of_another_digest_replaces_the_kspark_server_a_worker_has(
    clean_worker: None,
) -> None:
    # this process imports the client's own kspark_server (a worker's own installation)
    import kspark_server.transport  # noqa: F401

    own = sys.modules["kspark_server"]
    sources = {"kspark_server": (True, ""), "kspark_server.transport": (False, "V = 'b'\n")}
    _bootstrap.install("k", "e" * 64, lzma.compress(json.dumps(sources).encode()))
    import kspark_server.transport as t

    assert sys.modules["kspark_server"] is not own and t.V == "b"  # type: ignore[attr-defined]
    again = {"kspark_server": (True, ""), "kspark_server.transport": (False, "V = 'c'\n")}
    _bootstrap.install("k", "f" * 64, lzma.compress(json.dumps(again).encode()))
    import kspark_server.transport as t2

    assert t2.V == "c"  # type: ignore[attr-defined]
    assert len([f for f in sys.meta_path if hasattr(f, "kspark_bundle_digest")]) == 1


def test_a_bundled_traceback_shows_the_clients_lines(clean_worker: None) -> None:
    import traceback

    sources = {"kspark_server": (True, "\n\ndef boom():\n    raise ValueError('x')\n")}
    _bootstrap.install("t", "a" * 64, lzma.compress(json.dumps(sources).encode()))
    import kspark_server as ks

    try:
        ks.boom()
    except ValueError:
        text = traceback.format_exc()
    assert 'kspark_server/__init__.py", line 4' in text and "raise ValueError" in text


_HANDED_TO_PYSPARK = {
    "mapInArrow",
    "mapInPandas",
    "applyInPandas",
    "applyInPandasWithState",
    "foreachBatch",
}


def _handed(tree: ast.AST) -> Iterator[tuple[int, ast.expr]]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _HANDED_TO_PYSPARK
        ):
            arg = node.args[0] if node.args else None
            for k in node.keywords:
                if k.arg == "statefulProcessor":
                    arg = k.value
            assert arg is not None
            yield node.lineno, arg


def test_every_object_kspark_hands_to_pyspark_goes_through_shipped() -> None:
    """Forgotten, a function would name kspark_server's code by reference on workers that
    lack it. The ``foreachBatch`` writer is shipped by the function that makes it."""
    top = Path(kspark.__file__).parent
    missing = []
    for path in sorted(top.rglob("*.py")):
        for line, arg in _handed(ast.parse(path.read_text(encoding="utf-8"))):
            call = arg.func if isinstance(arg, ast.Call) else None
            name = call.id if isinstance(call, ast.Name) else None
            if name not in ("shipped", "writer_function"):
                missing.append(f"{path.relative_to(top)}:{line}")
    assert not missing
    sinks = (top / "compiler" / "lowering" / "sinks.py").read_text(encoding="utf-8")
    assert "return shipped(make_batch_writer(spec))" in sinks
