"""MkDocs hooks of the docs site (``hooks:`` in docs/mkdocs.yml)."""

from __future__ import annotations

import re
from typing import Any

_CELL = re.compile(r"<td[^>]*>.*?</td>", re.DOTALL)
_CODE = re.compile(r"<code>.*?</code>", re.DOTALL)


def _unescape_pipes(code: re.Match[str]) -> str:
    return code.group(0).replace("\\|", "|")


def on_page_content(html: str, **kwargs: Any) -> str:
    """A pipe inside code in a table cell is written ``\\|``, which GitHub's tables need and
    show as ``|``; Python-Markdown keeps the backslash there, so drop it the same way."""
    return _CELL.sub(lambda cell: _CODE.sub(_unescape_pipes, cell.group(0)), html)
