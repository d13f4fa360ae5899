"""What a component contributes to the rule file and the dashboard: its ``alerting.py``
returns a ``RuleFragment`` and a list of ``Row`` (``DetectorComponent.rules`` and
``rows``, ``monitor/contract/components.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Panel:
    """One dashboard panel: PromQL queries with their legends."""

    title: str
    queries: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    width: int = 8
    thresholds: list[float] = field(default_factory=list)
    # A stat or table coloured by state: ``colours[0]`` below the first threshold, then
    # ``colours[i]`` from ``thresholds[i - 1]`` up (Grafana's absolute threshold steps).
    colours: list[str] = field(default_factory=list)
    # Queries (by index) that count the evidence: shown as plain numbers, never coloured.
    counts: list[int] = field(default_factory=list)
    # The value as it is now (Grafana's instant query), not a series over the time range.
    instant: bool = False
    # A table's column -> the link its cells open (Grafana's ${__value.raw} is the cell).
    links: dict[str, str] = field(default_factory=dict)
    hidden_columns: list[str] = field(default_factory=list)


@dataclass
class Annotation:
    """A dashboard annotation: a PromQL query whose series mark events on every panel."""

    name: str
    expr: str
    title: str  # Grafana's titleFormat, may use {{label}}
    text: str
    tags: str  # comma-separated label names
    colour: str = "orange"


@dataclass
class Row:
    """A dashboard row of panels, and the annotations its component adds to the dashboard."""

    title: str
    panels: list[Panel]
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(frozen=True)
class RuleFragment:
    """A component's share of the rule file: recording rules, alerting rules, and the
    promtool unit-test files that exercise them."""

    recording: list[dict[str, Any]] = field(default_factory=list)
    alerting: list[dict[str, Any]] = field(default_factory=list)
    promtool_tests: list[Path] = field(default_factory=list)
    # What the rules derived from the guardrails (bounds, factors), written as comments
    # at the head of the generated rule file.
    derivations: list[str] = field(default_factory=list)
