"""The notebooks in ``notebooks/`` run top to bottom, against the test session's server.

Each notebook runs in a fresh Jupyter kernel (nbclient, kernel ``python3`` of this
interpreter's environment) with ``KSPARK_REMOTE`` set to the session's server, so no
notebook starts a server of its own. The server's workers cannot import kspark (see the
``spark_server`` fixture), so this also checks that the notebooks' code ships. The executed
copies are written to a temporary folder; the committed notebooks are not touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# what each notebook must show, beyond running without an error
EXPECTED: dict[str, list[str]] = {
    "01-getting-started": [
        "image/svg+xml",
        "6 records in, 5 out",
        "2 records in, 2 out",
    ],
    "02-dedup-and-temporal-joins": [
        "image/png",
        "400 converted payments, 400 distinct ids",
        "temporal join == merge_asof on every payment: True",
    ],
    "03-error-handling-dlq": [
        "KSPARK_PROCESSING_FAILED",
        "dropped per processor: {'to-fahrenheit': 2}",
        "builtins.ValueError",
        "kspark.errors.DeserializationError",
    ],
}

# appended to each notebook: the kernel used the remote server, not an embedded one
NO_EMBEDDED_SERVER = (
    "import kspark.runtime.server as _server\n"
    "assert _server._embedded is None, 'the notebook started its own server'\n"
    "print('no embedded server')"
)


@pytest.fixture(scope="module")
def remote_url(request: pytest.FixtureRequest, spark_server: Any) -> str:
    remote = request.config.getoption("--spark-remote")
    return str(remote) if remote else str(spark_server.url)


def _outputs_text(nb: Any) -> str:
    parts: list[str] = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(str(out.get("text", "")))
            for mime, data in (out.get("data") or {}).items():
                parts.append(mime)
                if mime.startswith("text/"):
                    parts.append(str(data))
    return "\n".join(parts)


def test_every_notebook_has_expectations() -> None:
    assert {p.stem for p in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path: Path, remote_url: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    nb.cells.append(nbformat.v4.new_code_cell(NO_EMBEDDED_SERVER))  # type: ignore[no-untyped-call]
    env = dict(os.environ)
    env["KSPARK_REMOTE"] = remote_url
    # the kernel imports kspark from this checkout, as the tests do
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "sdk"), str(ROOT / "server_plugin"), env.get("PYTHONPATH")) if p
    )
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute(env=env)
    finally:
        nbformat.write(nb, str(tmp_path / path.name))  # type: ignore[no-untyped-call]
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code_cells)
    text = _outputs_text(nb)
    assert "no embedded server" in text
    for expected in EXPECTED[path.stem]:
        assert expected in text, f"{path.name}: no output contains {expected!r}"
