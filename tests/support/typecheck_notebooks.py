"""Type-check the code cells of ``notebooks/*.ipynb`` with ``mypy --strict``.

Each notebook's code cells are joined, in order, into one module in a temporary folder, and
mypy checks them with the project's settings (``pyproject.toml``). Errors are reported
against the notebook and cell, so they can be found in Jupyter::

    python tests/support/typecheck_notebooks.py            # every notebook
    python tests/support/typecheck_notebooks.py notebooks/01-getting-started.ipynb

``./run test`` runs it after mypy. It needs ``nbformat`` and ``mypy`` (the ``dev`` extra).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNTYPED_OK = ("IPython.core.display", "IPython.core.display_functions", "matplotlib.dates")


def notebook_code(path: Path) -> tuple[str, list[tuple[int, int]]]:
    """The code cells of a notebook as one module, and, for each of its lines, the
    (cell number, line in cell) it came from; cells are numbered from 1 among all cells,
    as Jupyter shows them."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    lines: list[str] = []
    where: list[tuple[int, int]] = []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        for i, line in enumerate(str(cell.source).splitlines(), start=1):
            # IPython magics and shell escapes are not Python: keep the line count
            lines.append(f"# {line}" if line.lstrip().startswith(("%", "!")) else line)
            where.append((number, i))
        lines.append("")
        where.append((number, 0))
    return "\n".join(lines) + "\n", where


def check(paths: list[Path]) -> int:
    """Run mypy --strict over the notebooks; print the errors; return mypy's exit status."""
    from mypy import api

    with tempfile.TemporaryDirectory(prefix="kspark-nbtypes-") as tmp:
        files: dict[str, tuple[Path, list[tuple[int, int]]]] = {}
        modules: dict[str, tuple[Path, list[tuple[int, int]]]] = {}
        for path in paths:
            code, where = notebook_code(path)
            module = "nb_" + re.sub(r"\W", "_", path.stem)
            target = os.path.join(tmp, f"{module}.py")
            with open(target, "w") as f:
                f.write(code)
            files[target] = (path, where)
            modules[module] = (path, where)
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypy_path in pyproject.toml is relative to the project root
        try:
            out, err, status = api.run(
                [
                    "--config-file",
                    str(ROOT / "pyproject.toml"),
                    "--strict",
                    # IPython's display helpers and matplotlib's date formatters have no
                    # annotations; every other untyped call is still an error
                    *(f"--untyped-calls-exclude={m}" for m in UNTYPED_OK),
                    *files,
                ]
            )
        finally:
            os.chdir(cwd)

    def relabel(match: re.Match[str]) -> str:
        path, where = modules[match.group(1)]
        cell, line = where[int(match.group(2)) - 1]
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        return f"{shown}: cell {cell}, line {line}:"

    # match by module name: mypy's cache may report an earlier run's temporary folder
    names = "|".join(re.escape(m) for m in modules)
    pattern = re.compile(r"^\S*?\b(" + names + r")\.py:(\d+):", re.M)
    sys.stdout.write(pattern.sub(relabel, out))
    sys.stderr.write(err)
    return status


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not paths:
        print("no notebooks to check")
        return 0
    return check(paths)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
