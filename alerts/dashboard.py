"""The Grafana dashboard, assembled in code from the components' rows.

Each registered detector component (``monitor.contract.components``) contributes its rows,
built from its own config section and ``guardrails`` (one row per guardrail);
the sidecar's own health row (``alerts.health``) comes last. Guardrail
thresholds are drawn as constant series so that a panel shows the line it is
judged against. Fleet-wide quantiles come from the histograms (summed over
replicas); the per-replica window gauges are shown beside them. Releases (a new
``service.version``, from the release detector) are annotations on every panel. The first
row (``alerts.guardrail_row``) shows each guardrail as it stands, what fires and the
worst slices, from the recordings the alerts read.
Guardrail panels show the ``$variant`` chosen (production by default); panels of
recording rules show production, the only traffic the rules count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from alerts import field_coverage, health
from alerts.guardrail_row import guardrail_row
from alerts.rules import build_rules
from monitor.contract.components import DetectorComponent, load_collectors, load_components
from monitor.contract.config import Config, collector_section, detector_section
from monitor.contract.names import RELEASE_FIRST_SEEN, REQUESTS_TOTAL
from monitor.contract.rulekit.fragments import Annotation, Panel, Row
from monitor.contract.rulekit.promql import JOB, PRODUCTION_VARIANT

UID = "rag-monitor"
SCHEMA_VERSION = 39
_WIDTH = 24
# A release marks the first 10 minutes its version's first-seen series exists: a series
# that had no sample 10 minutes earlier (a replica restart keeps it, as gaps are shorter).
_RELEASE_MARK = "10m"


def release_annotation(datasource: dict[str, str]) -> dict[str, Any]:
    """The dashboard annotation query that marks releases on every time-series panel."""
    first_seen = f"max by (service, version) ({RELEASE_FIRST_SEEN}{{{JOB}}}"
    return {
        "name": "Releases",
        "enable": True,
        "hide": False,
        "iconColor": "purple",
        "datasource": datasource,
        "expr": f"{first_seen})\nunless\n{first_seen} offset {_RELEASE_MARK})",
        "step": "1m",
        "titleFormat": "release {{service}} {{version}}",
        "tagKeys": "service,version",
        "textFormat": "{{service}} {{version}} first seen",
    }


def row_annotation(annotation: Annotation, datasource: dict[str, str]) -> dict[str, Any]:
    """A component's annotation (``Row.annotations``) as a Grafana annotation query."""
    return {
        "name": annotation.name,
        "enable": True,
        "hide": False,
        "iconColor": annotation.colour,
        "datasource": datasource,
        "expr": annotation.expr,
        "step": "1m",
        "titleFormat": annotation.title,
        "tagKeys": annotation.tags,
        "textFormat": annotation.text,
    }


def variant_variable(datasource: dict[str, str]) -> dict[str, Any]:
    """The ``$variant`` the guardrail panels show: production by default, so shadow and
    canary traffic are looked at on purpose (the alerting rules read production only)."""
    definition = f"label_values({REQUESTS_TOTAL}, variant)"
    return {
        "name": "variant",
        "label": "Variant",
        "type": "query",
        "datasource": datasource,
        "query": {"query": definition, "refId": "variant"},
        "definition": definition,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": PRODUCTION_VARIANT, "value": PRODUCTION_VARIANT},
        "hide": 0,
    }


def dashboard_rows(
    config: Config, components: Sequence[DetectorComponent[Any]] | None = None
) -> list[Row]:
    """The rows of the dashboard: the guardrails now, the registered detector components'
    (or ``components``') by ``order``, the collector components', then what the monitor
    sees (field coverage), then the sidecar's health."""
    chosen = load_components() if components is None else components
    first = guardrail_row(config, build_rules(config, chosen), chosen)
    rows = [
        row
        for component in chosen
        for row in component.rows(detector_section(config, component), config.guardrails)
    ]
    collectors = [
        row
        for component in load_collectors()
        for row in component.rows(collector_section(config, component), config.guardrails)
    ]
    return [first, *rows, *collectors, *field_coverage.rows(config.guardrails), *health.rows()]


def build_dashboard(
    config: Config, components: Sequence[DetectorComponent[Any]] | None = None
) -> dict[str, Any]:
    """The Grafana dashboard JSON model."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[dict[str, Any]] = []
    y = 0
    rows = dashboard_rows(config, components)
    for row in rows:
        panels.append(
            {
                "type": "row",
                "title": row.title,
                "id": len(panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": _WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for panel in row.panels:
            if x + panel.width > _WIDTH:
                x, y = 0, y + 8
            panels.append(_panel(panel, len(panels) + 1, x, y, datasource))
            x += panel.width
        y += 8
    return {
        "uid": UID,
        "title": "RAG monitor: guardrails",
        "tags": ["rag", "rag-monitor"],
        "timezone": "utc",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "Job",
                    "type": "query",
                    "datasource": datasource,
                    "query": {"query": f"label_values({REQUESTS_TOTAL}, job)", "refId": "job"},
                    "definition": f"label_values({REQUESTS_TOTAL}, job)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "hide": 0,
                },
                variant_variable(datasource),
            ]
        },
        "annotations": {
            "list": [
                release_annotation(datasource),
                *(row_annotation(a, datasource) for row in rows for a in row.annotations),
            ]
        },
        "panels": panels,
    }


def _panel(
    panel: Panel, panel_id: int, x: int, y: int, datasource: dict[str, str]
) -> dict[str, Any]:
    model = _plain_panel(panel, panel_id, x, y, datasource)
    if panel.colours:
        _colour_by_state(model, panel)
    if panel.instant:
        for target in model["targets"]:
            target.update({"range": False, "instant": True})
            if panel.kind == "table":
                target["format"] = "table"
    if panel.kind == "table":
        _table(model, panel)
    return model


def _colour_by_state(model: dict[str, Any], panel: Panel) -> None:
    """Grafana's threshold steps from ``colours`` and ``thresholds``, the value's
    background in its state's colour; the evidence counts plain, in their own unit."""
    steps: list[dict[str, Any]] = [{"color": panel.colours[0], "value": None}]
    steps += [
        {"color": colour, "value": value}
        for colour, value in zip(panel.colours[1:], panel.thresholds, strict=True)
    ]
    defaults = model["fieldConfig"]["defaults"]
    defaults["thresholds"] = {"mode": "absolute", "steps": steps}
    defaults["color"] = {"mode": "thresholds"}
    model["fieldConfig"]["overrides"] = [
        {
            "matcher": {"id": "byFrameRefID", "options": chr(ord("A") + index)},
            "properties": [
                {"id": "unit", "value": "short"},
                {"id": "decimals", "value": 0},
                {"id": "color", "value": {"mode": "fixed", "fixedColor": "text"}},
            ],
        }
        for index in panel.counts
    ]
    model["options"] = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background",
        "graphMode": "none",
        "textMode": "value_and_name",
        "justifyMode": "auto",
        "orientation": "horizontal",
    }


def _table(model: dict[str, Any], panel: Panel) -> None:
    """A table of the series' labels: the hidden columns dropped, links on the columns
    ``links`` names."""
    model["transformations"] = [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {"excludeByName": dict.fromkeys(panel.hidden_columns, True)},
        },
    ]
    model["fieldConfig"]["overrides"] = [
        {
            "matcher": {"id": "byName", "options": column},
            "properties": [{"id": "links", "value": [{"title": column, "url": url}]}],
        }
        for column, url in panel.links.items()
    ]
    model["options"] = {"showHeader": True}


def _plain_panel(
    panel: Panel, panel_id: int, x: int, y: int, datasource: dict[str, str]
) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": datasource,
                "expr": expr,
                "legendFormat": legend,
                "range": True,
            }
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def render_dashboard(
    config: Config, components: Sequence[DetectorComponent[Any]] | None = None
) -> str:
    """``build_dashboard`` as indented JSON with a trailing newline."""
    return json.dumps(build_dashboard(config, components), indent=2) + "\n"


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
