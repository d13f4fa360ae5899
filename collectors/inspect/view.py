"""The terminal view of ``rag-monitor inspect``: one trace's report, and a summary.

Production text is shown (the operator inspects their own traces) but never as raw
terminal input: control characters are escaped and long texts cut with their length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from monitor.contract.variants import LABEL_VALUE

TEXT_LIMIT = 160  # characters of a text shown in the terminal
CONTEXTS_SHOWN = 10
_NAME_WIDTH = 26


def shown(value: Any, limit: int = TEXT_LIMIT) -> str:
    """A value for the terminal: control characters escaped, long text cut with its length."""
    if isinstance(value, str):
        cut = value[:limit]
        note = f"... ({len(value):,} characters)" if len(value) > limit else ""
        return f'"{escaped(cut)}"{note}'
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        return shown(orjson.dumps(value).decode(), limit).strip('"')
    return escaped(str(value))


def escaped(text: str) -> str:
    """``text`` with every character that is not printable written as its escape."""
    # Escape sequences, bidi overrides and newlines in production text must not reach the
    # terminal as such: every character that is not printable is written as its escape.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _origin(origin: dict[str, Any]) -> str:
    span = f'"{escaped(origin["span"])}" {origin["span_id"]}'
    if origin["scope"]:
        span += f" ({escaped(origin['scope'])})"
    where = origin["in"]
    name = escaped(origin.get("name", ""))
    pointer = escaped(origin.get("pointer", ""))
    place = {
        "attribute": f"attribute {name} {pointer}",
        "resource": f"resource attribute {name}",
        "event": f"event {name}",
        "scope": "instrumentation scope name",
        "times": "start and end times",
    }[where]
    return f"span {span}: {place.rstrip()}"


def _field_lines(name: str, entry: dict[str, Any], indent: str) -> list[str]:
    value = entry["value"]
    lines = [f"{indent}{name:<{_NAME_WIDTH}} {shown(value)}"]
    pad = indent + " " * (_NAME_WIDTH + 1)
    origins = entry.get("from", [])
    if "derived" in entry:
        lines.append(f"{pad}derived: {entry['derived']}")
    for origin in origins[: 1 if "derived" not in entry else 3]:
        lines.append(f"{pad}<- {_origin(origin)}")
    more = len(origins) - (1 if "derived" not in entry else 3) + entry.get("more", 0)
    if more > 0:
        lines.append(f"{pad}   (and {more} more place(s))")
    return lines


def render(report: dict[str, Any]) -> str:
    """The terminal view of one trace's report."""
    spans = report["spans"]
    what = "RAG request" if report["rag_request"] else "not a RAG request"
    lines = [f"trace {report['trace_id']}: {what}, {len(spans)} span(s)", "  spans"]
    for span in spans:
        lines.append(
            f"    {shown(span['span']):<28} {span['span_id']}  kind {span['kind'] or '-':<10}"
            f" scope {shown(span['scope']) if span['scope'] else '-'}"
        )
    fields = report.get("fields")
    if fields is not None:
        lines.append("  fields")
        request = report["request_span"]
        name = f'"{escaped(request["span"])}" {request["span_id"]}'
        lines.append(f"    {'request span':<{_NAME_WIDTH}} {name}")
        for name, entry in fields.items():
            if name == "contexts":
                lines.append(f"    {'contexts':<{_NAME_WIDTH}} {len(entry)} document(s)")
                for index, context in enumerate(entry[:CONTEXTS_SHOWN]):
                    for key, sub in context.items():
                        if key != "id_derived":
                            lines += _field_lines(f"[{index}] {key}", sub, "      ")
                if len(entry) > CONTEXTS_SHOWN:
                    lines.append(f"      ... {len(entry) - CONTEXTS_SHOWN} more (--json)")
            elif name == "usage":
                for index, usage in enumerate(entry):
                    for key, sub in usage.items():
                        lines += _field_lines(f"usage[{index}] {key}", sub, "    ")
            elif name == "stages":
                for stage, sub in entry.items():
                    lines += _field_lines(f"stages.{stage} (s)", sub, "    ")
            else:
                lines += _field_lines(name, entry, "    ")
    if report["missing"]:
        lines.append("  missing")
        for name, reason in report["missing"].items():
            lines.append(f"    {name:<{_NAME_WIDTH}} {escaped(reason)}")
    for reason in report.get("refused", []):
        lines.append(f"  {escaped(reason)}")
    if report["mapping"]:
        fills = report.get("mapping_fills", {})
        filled = sorted({field for fields in fills.values() for field in fields})
        lines.append(f"  suggested mapping (fills {', '.join(filled)}; checked by mapping again)")
        lines += ["    " + line for line in mapping_yaml(report["mapping"]).splitlines()]
    return "\n".join(lines) + "\n"


def mapping_yaml(mapping: dict[str, Any], instrumentations: Sequence[str] = ()) -> str:
    """``mapping`` content as the config file writes it (``collectors.spans.mapping``), with
    ``service.instrumentations`` when given."""
    import yaml

    snippet: dict[str, Any] = {}
    if instrumentations:
        snippet["service"] = {"instrumentations": list(instrumentations)}
    if mapping:
        snippet["collectors"] = {"spans": {"mapping": mapping}}
    return yaml.safe_dump(snippet, default_flow_style=None, sort_keys=False)


def _scopes_counted_as_other(
    reports: Sequence[dict[str, Any]], counted: Sequence[str]
) -> dict[str, int]:
    """Traces per instrumentation scope that field coverage folds into ``other``."""
    folded: dict[str, int] = {}
    for report in reports:
        scope = report.get("instrumentation")
        # A scope that is no label value could not go into the allow-list.
        if scope and scope not in counted and LABEL_VALUE.match(scope):
            folded[scope] = folded.get(scope, 0) + 1
    return folded


def summary(
    reports: Sequence[dict[str, Any]], counted: Sequence[str] = (), refused: Sequence[str] = ()
) -> str:
    """Totals over every trace, the document settings ``refused`` (with why), the
    instrumentation scopes field coverage counts as ``other`` (not in ``counted``,
    ``service.instrumentations``), and the suggested settings merged (lists joined in
    order), with those scopes added to ``service.instrumentations`` so that the coverage
    row names them."""
    requests = sum(report["rag_request"] for report in reports)
    lines = [f"{len(reports)} trace(s): {requests} RAG request(s), {len(reports) - requests} not"]
    missing: dict[str, int] = {}
    for report in reports:
        for name in report["missing"]:
            missing[name] = missing.get(name, 0) + 1
    lines += [f"  {name} missing in {count}" for name, count in missing.items()]
    lines += [f"  {escaped(reason)}" for reason in refused]
    merged: dict[str, Any] = {}
    helped = 0
    for report in reports:
        helped += bool(report["mapping"])
        for key, value in report["mapping"].items():
            if isinstance(value, list):
                known = merged.setdefault(key, [])
                known += [item for item in value if item not in known]
            else:
                merged.setdefault(key, value)
    folded = _scopes_counted_as_other(reports, counted)
    for scope, traces in folded.items():
        lines.append(
            f"  instrumentation scope {escaped(scope)} (counted as other in field coverage, "
            f"{traces} trace(s): add it to service.instrumentations)"
        )
    if merged or folded:
        named = [*counted, *folded] if folded else []
        lines.append(
            f"  suggested mapping (fills a missing field in {helped} trace(s)"
            + (", names the scopes counted as other" if folded else "")
            + "):"
        )
        lines += ["    " + line for line in mapping_yaml(merged, named).splitlines()]
    return "\n".join(lines) + "\n"
