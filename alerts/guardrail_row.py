"""The dashboard's first row: the guardrails as they stand, what fires, and the worst slices.

One stat per guardrail (``alerts.guardrail_series``): its current value and the bound
its alert tests, coloured against the guardrail (red on the breaching side), and the
events they rest on as a plain count, so that a red value on a handful of events reads
as what it is. Then the firing alerts with their runbook links (``ALERTS`` carries no
annotations, so the link of each alert comes from its rule's ``runbook`` annotation),
and the worst cells of each slice recording. Every query reads the recordings the
alerts read, so the row and the pages agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alerts.guardrail_series import Guardrail, guardrails, runbooks, slice_recordings
from monitor.contract.components import DetectorComponent
from monitor.contract.config import Config
from monitor.contract.rulekit.fragments import Panel, Row
from monitor.contract.rulekit.promql import JOB

TITLE = "Guardrails now"
ALERTS_TITLE = "Firing alerts"
SLICES_TITLE = "Worst slices"
WORST_CELLS = 5
GOOD, WARN, BAD, NEUTRAL = "green", "orange", "red", "text"


def _stat(guardrail: Guardrail) -> Panel:
    queries = [(guardrail.expr("value", JOB), guardrail.legend)]
    if guardrail.bound:
        queries.append((guardrail.expr("bound", JOB), f"{guardrail.legend} bound"))
    counts = []
    if guardrail.evidence:
        counts.append(len(queries))
        queries.append((guardrail.expr("evidence", JOB), guardrail.evidence_name))
    if guardrail.worse_above:
        thresholds = [guardrail.threshold]
        colours = [GOOD, BAD if guardrail.page is None else WARN]
        if guardrail.page is not None:
            thresholds.append(guardrail.page)
            colours.append(BAD)
    else:
        thresholds, colours = [guardrail.threshold], [BAD, GOOD]
    side = "above" if guardrail.worse_above else "below"
    bound = (
        " The second value is the bound the alert tests: red there means the evidence "
        "shows the breach, red on the value alone that it may be noise."
        if guardrail.bound
        else ""
    )
    return Panel(
        guardrail.title,
        queries,
        unit=guardrail.unit,
        kind="stat",
        description=f"Red {side} {guardrail.threshold:g} (guardrails); {guardrail.note}."
        f"{bound} Alerts: {', '.join(guardrail.alerts)}.",
        width=4,
        thresholds=thresholds,
        colours=colours,
        counts=counts,
        instant=True,
    )


def firing_alerts(document: dict[str, Any]) -> str:
    """PromQL of the firing alerts, each with its rule's runbook link as a label."""
    parts = [
        f'label_replace(ALERTS{{alertstate="firing", alertname="{name}"}}, '
        f'"runbook", "{link}", "", "")'
        for name, link in sorted(runbooks(document).items())
        if link
    ]
    return "\nor\n".join(parts)


def guardrail_row(
    config: Config,
    document: dict[str, Any],
    components: Sequence[DetectorComponent[Any]] | None = None,
) -> Row:
    """The first row, from the rules ``document`` generated for ``config``."""
    panels = [_stat(g) for g in guardrails(config, document, components)]
    panels.append(
        Panel(
            ALERTS_TITLE,
            [(firing_alerts(document), "")],
            kind="table",
            description="Alerts firing now (Prometheus's ALERTS series); the runbook column "
            "opens the alert's section of the runbook. Empty: nothing fires.",
            width=12,
            instant=True,
            links={"runbook": "${__value.raw}"},
            hidden_columns=["Time", "Value", "__name__", "alertstate"],
        )
    )
    cells = slice_recordings(config, document)
    if cells:
        queries = []
        for cell in cells:
            pick = "topk" if cell.worse_above else "bottomk"
            worst = cell.bound or cell.share
            queries.append(
                (
                    f"{pick}({WORST_CELLS}, {worst}{{{JOB}}})",
                    f"{cell.guardrail} {{{{dimension}}}}={{{{slice}}}}",
                )
            )
        panels.append(
            Panel(
                SLICES_TITLE,
                queries,
                kind="table",
                description=f"The {WORST_CELLS} worst intent and document-type cells of each "
                "guardrail by slice, ranked by the bound their evidence allows (the share "
                "where no bound is recorded): a cell ranks worst only when its evidence says so, "
                "not on the noise of a thin one.",
                width=12,
                instant=True,
                hidden_columns=["Time", "__name__"],
            )
        )
    return Row(TITLE, panels)
