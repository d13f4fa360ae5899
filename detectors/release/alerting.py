"""The release detector's panels. It has no rules of its own: every guardrail alert reads
its first-seen gauge for ``suspected_cause`` (``monitor.contract.rulekit.promql.triage``), and the
dashboard marks releases as annotations (``alerts.dashboard``)."""

from __future__ import annotations

from detectors.release.config import ReleaseConfig
from detectors.release.names import RELEASE_DROPPED_TOTAL, RELEASE_INFO
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Panel, Row
from monitor.contract.rulekit.promql import panel_gauge, panel_increase


def rows(config: ReleaseConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """The versions each service runs, and the release series not exported."""
    panels = [
        Panel(
            "Versions seen (service.version)",
            [
                (
                    panel_gauge("max", RELEASE_INFO, "service, version, environment"),
                    "{{service}} {{version}} {{environment}}",
                )
            ],
            unit="none",
            width=12,
        ),
        Panel(
            "Release series not exported",
            [(panel_increase(RELEASE_DROPPED_TOTAL, "reason"), "{{reason}}")],
            unit="none",
            width=12,
        ),
    ]
    return [Row("Releases", panels)]
