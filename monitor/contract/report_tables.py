"""Reports as tables: one self-contained HTML page or one Markdown file from the same
sections (``report review``, ``report shadow``).

A section is a title, a table (head and rows; no head: no table) and sentences. Every
string is escaped: reports show ids and, at times, production text, and production text
is hostile.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

Table = tuple[str, list[str], list[list[str]], list[str]]  # title, head, rows, sentences
NOTHING = "Nothing yet."
_STYLE = (
    "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;"
    "padding:0 1rem;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:.3rem .6rem}th{background:#f4f4f4}small{color:#666}</style></head><body>"
)


def tables_html(title: str, subtitle: str, sections: Sequence[Table]) -> str:
    """A self-contained page: no script, no outside resource."""
    esc = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
        _STYLE,
        f"<h1>{esc(title)}</h1>",
        f"<p><small>{esc(subtitle)}</small></p>",
    ]
    for heading, head, rows, sentences in sections:
        parts.append(f"<h2>{esc(heading)}</h2>")
        if rows:
            parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
            for row in rows:
                parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
            parts.append("</table>")
        elif head:
            parts.append(f"<p>{NOTHING}</p>")
        parts.extend(f"<p>{esc(s)}</p>" for s in sentences)
    parts.append("</body></html>")
    return "\n".join(parts)


def markdown_text(text: str) -> str:
    """``text`` safe in Markdown: inline HTML escaped, no cell separator, no line break."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def tables_markdown(title: str, subtitle: str, sections: Sequence[Table]) -> str:
    md = markdown_text
    lines = [f"# {md(title)}", "", f"_{md(subtitle)}_"]
    for heading, head, rows, sentences in sections:
        lines += ["", f"## {md(heading)}"]
        if rows:
            lines += ["", "| " + " | ".join(md(h) for h in head) + " |"]
            lines.append("|" + "---|" * len(head))
            lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
        elif head:
            lines += ["", NOTHING]
        for sentence in sentences:
            lines += ["", md(sentence)]
    return "\n".join(lines) + "\n"
