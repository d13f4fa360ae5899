"""Field coverage's share of the rules and the dashboard: what the monitor can see.

A field an enabled detector reads (``DetectorComponent.fields``) that production
requests lack makes that detector count them as missing instead of judging them: the
guardrail goes quiet on exactly the traffic an unknown instrumentation sends. So each
such field has a ticket, ``RagTraceFieldMissing``, per field and instrumentation, on the
lower Wilson bound of the missing share over ``guardrails.coverage_window`` (its z from
the ticket budget, ``monitor.contract.rulekit.evidence``) and on at least ``guardrails.min_events``
requests: a handful of odd traces do not fire it, an instrumentation that never fills the
field does within the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.contract.components import DetectorComponent
from monitor.contract.config import Config, detector_section
from monitor.contract.field_presence import REQUEST
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import (
    DERIVED_DOCUMENT_IDS_TOTAL,
    FIELDS_TOTAL,
    MISSING_INPUTS_TOTAL,
    OTHER_INSTRUMENTATIONS_TOTAL,
    RETRIEVAL_CALLS,
    TOOL_CALLS_TOTAL,
    missing_lower_bound,
    missing_ratio,
    requests_count,
)
from monitor.contract.rulekit.evidence import (
    BoundedShare,
    confidence,
    derivation,
    hold_for,
    window_z,
)
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    JOB,
    alert,
    panel_quantile,
    panel_rate,
    panel_ratio,
    percent,
    recorded_value,
)

# The incident kind of ``rag-monitor rules backtest --simulate`` that these rules catch
# (``alerts/simulate.py``): requests without contexts, as an instrumentation the mapping
# cannot read sends.
COVERAGE = "coverage"
PROMTOOL_TESTS = [Path(__file__).parent / "tests" / "coverage_test.yaml"]
BY = "job, field, instrumentation"


def needed_fields(config: Config, components: Sequence[DetectorComponent[Any]]) -> list[str]:
    """The fields the configured detectors read, in a stable order."""
    needed: set[str] = set()
    for component in components:
        needed.update(component.fields(detector_section(config, component), config.guardrails))
    return sorted(needed)


def missing_share(fields: Sequence[str]) -> BoundedShare:
    """The share of production requests without each of ``fields`` (the counter counts
    production requests only), kept apart by field and instrumentation."""
    matcher = f'field=~"{"|".join(fields)}"'
    return BoundedShare(
        hits=f'{FIELDS_TOTAL}{{{matcher}, present="false"}}',
        events=f"{FIELDS_TOTAL}{{{matcher}}}",
        share=missing_ratio,
        count=requests_count,
        bound=missing_lower_bound,
        side="lower",
        by=BY,
    )


def rules(config: Config, components: Sequence[DetectorComponent[Any]]) -> RuleFragment:
    """The missing share, its count and lower bound, and the ticket, for the needed fields."""
    fields = needed_fields(config, components)
    if not fields:
        return RuleFragment()
    guardrails = config.guardrails
    window = guardrails.coverage_window
    windows = window_z(guardrails, "ticket", [window])
    [(_, z)] = windows
    labels = ("job", "field", "instrumentation")
    requests = recorded_value(requests_count(window), labels, 'printf "%.0f"')
    share = recorded_value(missing_ratio(window), labels, "humanizePercentage")
    limit = percent(guardrails.field_missing_max)
    ticket = alert(
        guardrails,
        "RagTraceFieldMissing",
        f"{missing_lower_bound(window)} > {guardrails.field_missing_max}\n"
        f"and on ({BY})\n{requests_count(window)} >= {guardrails.min_events}",
        severity="ticket",
        suspected_cause=False,
        summary="Production requests from {{ $labels.instrumentation }} lack "
        "{{ $labels.field }} ({{ $labels.job }})",
        description=f"Over the last {window}, {share} of {requests} production requests "
        "written by the instrumentation {{ $labels.instrumentation }} carried no "
        f"{{{{ $labels.field }}}}; even the {confidence(z)} lower bound of that share, "
        f"{{{{ $value | humanizePercentage }}}}, is above {limit}. The detectors that read "
        "the field count these requests as missing instead of judging them, so their "
        "guardrails rest on the rest of the traffic. Run rag-monitor inspect on an export of "
        "these traces: it names where the value sits and prints the mapping: that reads it.",
        for_=hold_for(guardrails),
        labels={"window": window},
    )
    return RuleFragment(
        recording=missing_share(fields).recording(window, z),
        alerting=[ticket],
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivation(
            "RagTraceFieldMissing", windows, f"lower bound of the missing share ({limit} max)"
        ),
    )


def rows(guardrails: GuardrailsConfig) -> list[Row]:
    """What the monitor sees: the share of requests carrying each field, per instrumentation,
    the scopes counted as other by name, the traces it could not read as requests, the
    traces each detector could not judge, documents whose id it derived, an agent's tool
    calls by tool and the retrieval steps per request."""
    window = guardrails.coverage_window

    def seen(matchers: str) -> str:
        return f"sum by (field, instrumentation) (increase({FIELDS_TOTAL}{{{matchers}}}[{window}]))"

    share_present = panel_ratio(seen(f'{JOB}, present="true"'), seen(JOB))
    panels = [
        Panel(
            f"Fields present, by instrumentation (share of production requests, last {window})",
            [(share_present, "{{instrumentation}} · {{field}}")],
            unit="percentunit",
            kind="bargauge",
            description="One bar per field and instrumentation scope: the share of "
            "production requests that carried the field. A field at 0 is one the mapping "
            "cannot find in that instrumentation's spans: run rag-monitor inspect and add "
            "the mapping: it prints. field request counts every trace, those that could not "
            "be read as a request at all included.",
            width=24,
        ),
        Panel(
            "Instrumentation scopes counted as other",
            [(panel_rate(OTHER_INSTRUMENTATIONS_TOTAL, by="scope"), "{{scope}}")],
            unit="ops",
            description='The instrumentation scopes behind instrumentation="other" above '
            "(not in service.instrumentations), by name: add a scope there to see its "
            "coverage by name (rag-monitor inspect prints the snippet).",
            width=8,
        ),
        Panel(
            "Traces not read as requests, by instrumentation",
            [
                (
                    panel_rate(
                        FIELDS_TOTAL, f'field="{REQUEST}", present="false"', "instrumentation"
                    ),
                    "{{instrumentation}}",
                )
            ],
            unit="ops",
            description="Traces with no LLM span and no span of "
            "collectors.spans.mapping.request_kinds with a query: index building and health "
            "checks, or an instrumentation whose spans the mapping does not recognise.",
            width=8,
        ),
        Panel(
            "Traces a detector could not judge, by missing field",
            [(panel_rate(MISSING_INPUTS_TOTAL, by="detector, field"), "{{detector}} · {{field}}")],
            unit="ops",
            description="Traces each detector counted as missing instead of computing a value "
            "from an empty input (HHEM on no contexts, a $0 request without tokens, ...).",
            width=8,
        ),
        Panel(
            "Documents with a derived id, by instrumentation",
            [(panel_rate(DERIVED_DOCUMENT_IDS_TOTAL, by="instrumentation"), "{{instrumentation}}")],
            unit="ops",
            description="Retrieved documents without any id: still contexts (their text is "
            "the evidence), with an id derived from the text that no label can name.",
            width=8,
        ),
        *_agent_panels(),
    ]
    return [Row("What the monitor sees", panels)]


def _agent_panels() -> list[Panel]:
    """An agent's tool calls by tool, and the retrieval steps per request."""
    return [
        Panel(
            "Tool calls, by tool and whether read as retrieval",
            [(panel_rate(TOOL_CALLS_TOTAL, by="tool, retrieval"), "{{tool}} · {{retrieval}}")],
            unit="ops",
            description="An agent's tool calls by tool name: retrieval=true when the result "
            "held documents (or collectors.spans.mapping.retrieval_tools names the tool). A "
            "tool that retrieves but reads false returns a shape to name there.",
            width=8,
        ),
        Panel(
            "Retrieval steps per request (p50, p95), by instrumentation",
            [
                (
                    panel_quantile(q, RETRIEVAL_CALLS, "instrumentation"),
                    f"{{{{instrumentation}}}} p{q * 100:g}",
                )
                for q in (0.5, 0.95)
            ],
            description="Retriever spans and tool calls that retrieved, per production request: "
            "a pipeline retrieves once, an agent may retrieve several times, a runaway loop "
            "many.",
            width=8,
        ),
    ]
