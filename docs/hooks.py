"""MkDocs hook (see mkdocs.yml): the docstrings use Sphinx roles such as
``:meth:`KStream.split```, which mkdocstrings renders literally as
``:meth:<code>KStream.split</code>``. Drop the role and, as Sphinx does, shorten a
``~``-prefixed target to its last part."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:meth|func|class|attr|mod|data|exc|obj):<code>(~?)([^<]*)</code>")


def _replace(m: re.Match[str]) -> str:
    target = m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)
    return f"<code>{target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_replace, html)
