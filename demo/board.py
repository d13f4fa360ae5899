"""The demo's board: a ``demo.view`` snapshot as the lines of a screen.

Without bounds (a pipe) it is the whole board. Given a terminal's columns and rows it
fits them, so that a redraw neither wraps nor scrolls. Narrower, the guardrail table
shortens then drops its trend column, then drops each row's estimate, the ``n`` column
and the ``bound`` column; the title and the incident line take a shorter wording; every
other line is cut with an ellipsis (a list at a name, with "+N more") rather than
wrapped. Shorter, the title, the incident line and the guardrail table stay, and the
other lines go, the least telling first, counted on one "+N more lines" line.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from demo.rule_evaluation import BREACH, NOT_HERE
from demo.view import TREND_POINTS, GuardrailRow, Links, Snapshot

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 100  # where the Prometheus-only list wraps without a terminal
TREND_MIN = 5  # fewer bars say too little of a trend to be worth the room
ELLIPSIS = "…"

# How soon a short terminal drops a line: the highest tier first, and within a tier the
# lowest line first. The title, the incident line and the guardrail table always stay.
ALWAYS, STATUS, CONTEXT, LINKS, LIST, COMMANDS, GAP = range(7)
Ranked = list[tuple[int, str]]


@dataclass(frozen=True)
class Column:
    head: str  # "{window}" stands for the time the values cover
    width: int  # with the gap before the next column; the trend's: the most bars it shows
    cell: Callable[[GuardrailRow], str]
    left: bool = False


def _test(row: GuardrailRow) -> str:
    return "-" if row.op is None or row.threshold is None else f"{row.op} {row.threshold:g}"


WIDE_NAME = Column(
    "guardrail, over the last {window}", 34, lambda r: f"{r.guardrail} ({r.estimate})", True
)
NAME = Column("guardrail, last {window}", 22, lambda r: r.guardrail, True)
VALUE = Column("value", 9, lambda r: _number(r.value))
BOUND = Column("bound", 9, lambda r: _number(r.bound))
THRESHOLD = Column("threshold", 11, _test)
COUNT = Column("n", 7, lambda r: _count(r.evidence))
STATE = Column("  state", 24, lambda r: "  " + _state(r.state), True)
TREND = Column("trend", TREND_POINTS, lambda r: _sparkline(r.trend, r.threshold), True)
# The table's layouts, widest first: what a narrower terminal gives up, in order.
LAYOUTS = (
    (WIDE_NAME, VALUE, BOUND, THRESHOLD, COUNT, STATE, TREND),
    (WIDE_NAME, VALUE, BOUND, THRESHOLD, COUNT, STATE),
    (NAME, VALUE, BOUND, THRESHOLD, COUNT, STATE),
    (NAME, VALUE, BOUND, THRESHOLD, STATE),
    (NAME, VALUE, THRESHOLD, STATE),
)


def as_text(snapshot: Snapshot, columns: int | None = None, rows: int | None = None) -> list[str]:
    """The snapshot as the lines of the screen: all of them, as wide as they come, or
    fitted to ``columns`` and ``rows`` where given."""
    lines = _shortened(_ranked(snapshot, columns), rows)
    if columns is None:
        return lines
    return [_cut(_printable(line), columns) for line in lines]


def _ranked(s: Snapshot, width: int | None) -> Ranked:
    """Every line of the board with its tier, each fitted to ``width`` where given."""
    ranked = [
        (ALWAYS, _title(s, width)),
        (CONTEXT, f"release: {s.service} {s.release}, serving since {_clock(s.release_since_s)}"),
        (ALWAYS, _first_fit(_incident_lines(s), width)),
        (GAP, ""),
    ]
    ranked += [(ALWAYS, line) for line in _table(s, width)]
    met = [title for title, state in s.other_alerts.items() if state == BREACH]
    ranked.append(
        (STATUS, _listed("other alerts: ", met, " met", width))
        if met
        else (STATUS, f"other alerts: none of the {len(s.other_alerts)} the demo evaluates is met")
    )
    only = "evaluated by Prometheus only: "
    if width is None:
        wrapped = textwrap.wrap(only + ", ".join(s.prometheus_only), WIDTH, subsequent_indent="  ")
        ranked += [(LIST, line) for line in wrapped]
    else:
        ranked.append((LIST, _listed(only, s.prometheus_only, "", width)))
    ranked += [
        (CONTEXT, f"model missing: {need} (rag-monitor models fetch)") for need in s.missing_models
    ]
    return ranked + _links(s.links, width)


def _links(links: Links, width: int | None) -> Ranked:
    return [
        (GAP, ""),
        (LINKS, "look next:"),
        (LINKS, f"  metrics  {links.metrics}"),
        *([(LINKS, f"  review   {links.review}")] if links.review else []),
        *((COMMANDS, f"  {'run' if n == 0 else '':<8} {c}") for n, c in enumerate(links.commands)),
        (COMMANDS, f"  docs     {links.docs}"),
        # Cut in the middle: the file's name and how to stop stay.
        (STATUS, _cut(f"log: {links.log} · Ctrl-C stops", width, middle=True)),
    ]


def _shortened(ranked: Ranked, rows: int | None) -> list[str]:
    """At most ``rows`` lines: the highest tiers dropped first, then counted on a last
    line (blank lines go first, uncounted)."""
    kept = dict(enumerate(ranked))  # popping keeps the others in their order
    hidden = 0
    for n in sorted(
        (n for n, (tier, _) in kept.items() if tier), key=lambda n: (-ranked[n][0], -n)
    ):
        if rows is None or len(kept) + bool(hidden) <= rows:
            break
        hidden += bool(kept.pop(n)[1])
    lines = [line for _, line in kept.values()]
    if hidden:
        lines.append(f"+{hidden} more lines in a taller terminal")
    return lines if rows is None else lines[:rows]


def _title(s: Snapshot, width: int | None) -> str:
    where = f"rag-monitor demo · {_clock(s.elapsed_s)} into a {_clock(s.cycle_s)} cycle"
    rate = f"{s.requests_per_s:.1f} requests/s"
    return _first_fit(
        [
            f"{where} · {rate} (+{s.shadow_per_s:.1f}/s shadow twins), {s.requests:.0f} in all",
            f"{where} · {rate} (+{s.shadow_per_s:.1f}/s shadow)",
            f"{where} · {rate}",
        ],
        width,
    )


def _incident_lines(s: Snapshot) -> list[str]:
    """The incident line, in wordings from the fullest to the shortest."""
    if (run := s.incident) is not None:
        met = "not met yet" if run.met_at_s is None else f"met at {_clock(run.met_at_s)}"
        when = f"({_clock(run.start_s)}-{_clock(run.end_s)})"
        return [
            f"incident now: {run.name} {when} -> {run.alert} should fire: {met}",
            f"incident now: {run.name} -> {run.alert}: {met}",
        ]
    parts = []
    if (last := s.last_incident) is not None:
        met = "never met" if last.met_at_s is None else f"met at {_clock(last.met_at_s)}"
        parts.append(f"last {last.name} -> {last.alert} {met}")
    if (upcoming := s.next_incident) is not None:
        parts.append(f"next {upcoming.name} at {_clock(upcoming.start_s)}")
    return [
        f"incident now: none ({'; '.join(parts)})",
        f"incident now: none ({'; '.join(parts[-1:])})",
    ]


def _table(s: Snapshot, width: int | None) -> list[str]:
    """The guardrail table's header and rows in the widest layout that fits ``width``;
    the trend keeps its latest bars that fit, at least ``TREND_MIN``."""
    lines: list[str] = []
    for layout in LAYOUTS:
        bars = TREND_POINTS
        if width is not None and TREND in layout:
            bars = min(TREND_POINTS, width - sum(c.width for c in layout if c is not TREND))
            if bars < TREND_MIN:
                continue
        lines = _render(s, layout, bars)
        if width is None or max(map(_cells, lines)) <= width:
            break
    return lines  # the narrowest layout where none fits: the board cuts its lines


def _render(s: Snapshot, layout: Sequence[Column], bars: int) -> list[str]:
    window = _clock(s.window_s)
    table = [[c.head.format(window=window) for c in layout]]
    table += [[c.cell(row) for c in layout] for row in s.guardrails]
    return [_joined(layout, cells, bars) for cells in table]


def _joined(layout: Sequence[Column], cells: list[str], bars: int) -> str:
    """One line of the table: each cell padded to its column's width but the last; of the
    trend, the latest ``bars``."""
    texts = [
        text[-bars:] if column is TREND else text
        for column, text in zip(layout, cells, strict=True)
    ]
    padded = [
        text.ljust(column.width) if column.left else text.rjust(column.width)
        for column, text in zip(layout[:-1], texts[:-1], strict=True)
    ]
    return "".join(padded) + texts[-1]


def _first_fit(wordings: list[str], width: int | None) -> str:
    """The first wording no wider than ``width``, or the last one cut to it."""
    for wording in wordings:
        if width is None or _cells(wording) <= width:
            return wording
    return _cut(wordings[-1], width)


def _listed(head: str, names: list[str], tail: str, width: int | None) -> str:
    """``head``, the names and ``tail`` on one line: as many names as fit, then how many
    more there are; or only how many, where no name fits."""
    for shown in range(len(names), 0, -1):
        more = "" if shown == len(names) else f" +{len(names) - shown} more"
        line = f"{head}{', '.join(names[:shown])}{more}{tail}"
        if width is None or _cells(line) <= width:
            return line
    return _cut(f"{head}{len(names) if names else ''}{tail}", width)


def _cells(text: str) -> int:
    """The columns ``text`` takes on a terminal: two for a wide character, none for a
    combining one."""
    return sum(_char_cells(char) for char in text)


def _char_cells(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def _cut(text: str, width: int | None, *, middle: bool = False) -> str:
    """``text`` in at most ``width`` columns, an ellipsis for what is cut (at the end, or
    in the middle to keep both ends)."""
    if width is None or _cells(text) <= width:
        return text
    if width < 1:
        return ""
    room = width - 1
    if not middle:
        return _head(text, room) + ELLIPSIS
    tail = _head(text[::-1], room // 2)[::-1]
    return _head(text, room - _cells(tail)) + ELLIPSIS + tail


def _head(text: str, width: int) -> str:
    taken = 0
    for n, char in enumerate(text):
        taken += _char_cells(char)
        if taken > width:
            return text[:n]
    return text


def _printable(text: str) -> str:
    """A control character (a path may hold one) would move the cursor off the board."""
    return "".join("?" if unicodedata.category(char) == "Cc" else char for char in text)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _number(value: float | None) -> str:
    """Shares and dollars alike to four decimals: a bound of 1e-17 (a share of 0 less
    rounding) reads 0.0000, not in exponent notation."""
    return "-" if value is None else f"{value:.4f}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _state(state: str) -> str:
    return "Prometheus only" if state == NOT_HERE else state


def _sparkline(values: list[float | None], threshold: float | None) -> str:
    """The values as bars on a scale that spans them and the threshold, so that a bar's
    height says how near the threshold the value came."""
    seen = [v for v in values if v is not None]
    if not seen:
        return ""
    limits = seen if threshold is None else [*seen, threshold]
    low, high = min(limits), max(limits)
    span = (high - low) or 1.0
    top = len(BARS) - 1
    return "".join(" " if v is None else BARS[round((v - low) / span * top)] for v in values)
