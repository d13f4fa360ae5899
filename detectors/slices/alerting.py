"""The slices detector's rules and dashboard rows: every guardrail by slice, with tickets,
and the regeneration rate by intent and the coverage matrix.

Each guardrail's detector counts its production verdicts by slice (``monitor.contract.slicing``);
here, per sample window, each slice's share gets the evidence it rests on and its Wilson
bound (``monitor.contract.rulekit.evidence``), as the global guardrail does: the faithfulness pass
share (by judge, kept to the running judges), the false-exclusion rate, each latency SLO
stage's slow share; and the mean cost per query over the longest window. A slice alert is
a ticket, never a page: the global guardrail pages; a slice says where to look, and
catches an incident that one intent or document type dilutes in the global figure. It
fires when the slice's bound breaches while the slice has ``guardrails.min_events`` in the
window, and the ticket budget is shared by every slice and window, so that configuring
more slices does not mean more false tickets. The regeneration rate by intent is recorded
without an alert (the feedback detector's band watches the global rate)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from detectors.slices.config import SlicesConfig
from detectors.slices.names import (
    COVERAGE_REQUESTS_TOTAL,
    SLICE_EVICTED_TRACES_TOTAL,
    SLICE_REGENERATIONS_TOTAL,
    SLICE_REQUESTS_TOTAL,
    SLICE_UNMATCHED_FEEDBACK_TOTAL,
    regeneration_ratio_by_intent,
)
from monitor.contract.durations import parse_duration
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import (
    JUDGE_INFO,
    SLICE_COST_REQUESTS_TOTAL,
    SLICE_COST_USD_TOTAL,
    SLICE_EXCLUSION_QUERIES_TOTAL,
    SLICE_FAITHFULNESS_BELOW_TOTAL,
    SLICE_FAITHFULNESS_SCORED_TOTAL,
    SLICE_FALSE_EXCLUSIONS_TOTAL,
    SLICE_JUDGE_AGREEMENT_TOTAL,
    SLICE_LATENCY_REQUESTS_TOTAL,
    SLICE_LATENCY_SLOW_TOTAL,
    slice_recording,
)
from monitor.contract.rulekit.corrected_rules import CorrectedShare, CorrectionEvidence
from monitor.contract.rulekit.evidence import BoundedShare, Side, derivation, hold_for, window_z
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    JOB,
    RATE,
    alert,
    panel_rate,
    percent,
    ratio,
    recorded_value,
    sum_increase,
    sum_rate,
)
from monitor.contract.variants import PRODUCTION

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
# Guardrail figures are production's: shadow and canary traffic is compared, not judged.
SERVED = f'{{variant="{PRODUCTION}"}}'
BY_INTENT = "job, intent"
BY_SLICE = "job, dimension, slice"
BY_JUDGE_SLICE = "job, judge, dimension, slice"
BY_STAGE_SLICE = "job, stage, dimension, slice"
WHERE = "the {{ $labels.dimension }} slice {{ $labels.slice }}"


def _share(
    guardrail: str, evidence: str, *, hits: str, events: str, side: Side, by: str, **kept: Any
) -> BoundedShare:
    """A slice share whose recordings are named by ``slice_recording``."""
    return BoundedShare(
        hits=hits,
        events=events,
        share=functools.partial(slice_recording, guardrail, "ratio_rate"),
        count=functools.partial(slice_recording, evidence, "increase"),
        bound=functools.partial(slice_recording, guardrail, f"{side}_bound"),
        side=side,
        by=by,
        **kept,
    )


# The pass share is kept to the judges that run now, as the global one (faithfulness rules).
FAITHFULNESS = _share(
    "faithfulness_pass",
    "faithfulness_scored",
    hits=SLICE_FAITHFULNESS_BELOW_TOTAL,
    events=SLICE_FAITHFULNESS_SCORED_TOTAL,
    side="upper",
    by=BY_JUDGE_SLICE,
    complement=True,
    only=f"group by (job, judge) ({JUDGE_INFO})",
    only_on="job, judge",
)
FALSE_EXCLUSION = _share(
    "false_exclusion",
    "exclusion_queries",
    hits=SLICE_FALSE_EXCLUSIONS_TOTAL,
    events=SLICE_EXCLUSION_QUERIES_TOTAL,
    side="lower",
    by=BY_SLICE,
)
# Corrected by the slice's own random reviews, where they suffice (as the global share).
CORRECTED = CorrectedShare(
    prefix="slice_faithfulness",
    agreement=SLICE_JUDGE_AGREEMENT_TOTAL,
    judge_yes='hhem="supported"',
    judged_share=FAITHFULNESS.share,
    judged_count=FAITHFULNESS.count,
    by=BY_JUDGE_SLICE,
)
LATENCY_SLOW = _share(
    "latency_slow",
    "latency_requests",
    hits=SLICE_LATENCY_SLOW_TOTAL,
    events=SLICE_LATENCY_REQUESTS_TOTAL,
    side="lower",
    by=BY_STAGE_SLICE,
)


def rules(config: SlicesConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """Every guardrail by slice with its ticket, and the regeneration rate by intent."""
    slice_rules = _slice_guardrails(config, guardrails)
    return RuleFragment(
        recording=[*slice_rules.recording, _regeneration_by_intent(guardrails)],
        alerting=slice_rules.alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=slice_rules.derivations,
    )


def _slice_guardrails(config: SlicesConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """Per sample window the three shares' recordings and tickets; the cost per query over
    the longest window. The z of a share's ticket comes from the ticket budget shared by
    every slice, window and (latency) SLO stage."""
    slices = config.slicer().size
    windows = guardrails.sample_windows
    stages = guardrails.latency_slo
    shares_z = window_z(guardrails, "ticket", windows, series=slices)
    latency_z = window_z(guardrails, "ticket", windows, series=slices * len(stages))
    correction = guardrails.review_correction
    [(_, bias_z)] = window_z(guardrails, "ticket", [correction.window], sides=2, series=slices)
    recording = CORRECTED.review_recording(correction.window, bias_z)
    alerting = []
    for (window, z), (_, stage_z) in zip(shares_z, latency_z, strict=True):
        recording += FAITHFULNESS.recording(window, z)
        corrected = CORRECTED.debiased(window, "upper_bound")
        recording += CORRECTED.recording(window, correction.window, [(corrected, z)])
        evidence = CorrectionEvidence(correction, FAITHFULNESS.count(window), guardrails.min_events)
        recording += FALSE_EXCLUSION.recording(window, z)
        recording += LATENCY_SLOW.recording(window, stage_z)
        alerting += [
            _ticket(
                guardrails,
                "RagSliceFaithfulnessLow",
                FAITHFULNESS,
                window,
                CORRECTED.page_expr(
                    FAITHFULNESS.bound(window), corrected, guardrails.faithfulness_min, evidence
                ),
                summary=f"Fewer than {percent(guardrails.faithfulness_min)} of sampled answers "
                f"are faithful in {WHERE}",
                counted="answers scored by the judge {{ $labels.judge }}",
                what="reached the faithfulness threshold; even the upper bound of that share",
                breach=f"is below the guardrail of {percent(guardrails.faithfulness_min)} "
                "(estimate {{ $labels.estimate }}: corrected by the slice's own random "
                f"reviews once {correction.min_random_reviews} exist in the last "
                f"{correction.window}, the judge's own bound until then)",
                labels=("job", "judge", "dimension", "slice"),
            ),
            _ticket(
                guardrails,
                "RagSliceFalseExclusionHigh",
                FALSE_EXCLUSION,
                window,
                f"{FALSE_EXCLUSION.bound(window)} > {guardrails.false_exclusion_max}",
                summary=f"The relevance filter removes all gold from more than "
                f"{percent(guardrails.false_exclusion_max)} of labeled queries in {WHERE}",
                counted="labeled queries",
                what="lost every eligible gold document to a relevance filter; even the "
                "lower bound of that rate",
                breach=f"is above the guardrail of {percent(guardrails.false_exclusion_max)}",
                labels=("job", "dimension", "slice"),
            ),
            _ticket(
                guardrails,
                "RagSliceLatencySlow",
                LATENCY_SLOW,
                window,
                _slow_test(guardrails, LATENCY_SLOW.bound(window)),
                summary=f"Stage {{{{ $labels.stage }}}} is slower than its SLO in {WHERE}",
                counted="requests",
                what="were slower than the stage's SLO threshold; even the lower bound of "
                "that share",
                breach="is above the share the SLO allows (1 - objective)",
                labels=("job", "stage", "dimension", "slice"),
            ),
        ]
    longest = max(windows, key=parse_duration)
    recording += _cost_per_query(longest)
    alerting.append(_cost_ticket(guardrails, longest))
    derivations = [
        *derivation("RagSliceFaithfulnessLow", shares_z, "upper bound per slice"),
        *derivation("RagSliceFalseExclusionHigh", shares_z, "lower bound per slice"),
        *derivation("RagSliceLatencySlow", latency_z, "lower bound per slice and stage"),
    ]
    return RuleFragment(recording=recording, alerting=alerting, derivations=derivations)


def _slow_test(guardrails: GuardrailsConfig, bound: str) -> str:
    """Each SLO stage's slow-share bound against the share its objective allows."""
    return "\nor\n".join(
        f'{bound}{{stage="{stage}"}} > {1 - slo.objective:.6g}'
        for stage, slo in guardrails.latency_slo.items()
    )


def _ticket(
    guardrails: GuardrailsConfig,
    name: str,
    share: BoundedShare,
    window: str,
    breached: str,
    *,
    summary: str,
    counted: str,
    what: str,
    breach: str,
    labels: tuple[str, ...],
) -> dict[str, Any]:
    """A slice's ticket on ``window``: its bound ``breached`` while the slice has the
    evidence."""
    count, bound = share.count(window), share.bound(window)
    point = recorded_value(share.share(window), labels, "humanizePercentage")
    evidence = recorded_value(count, labels, 'printf "%.0f"')
    return alert(
        guardrails,
        name,
        f"(\n{breached}\n)\nand on ({share.by}) {count} >= {guardrails.min_events}",
        severity="ticket",
        summary=summary + " ({{ $labels.job }})",
        description=f"Over the last {window}, {point} of the {evidence} {counted} in {WHERE} "
        f"{what} ({bound}), {{{{ $value | humanizePercentage }}}}, {breach}. The global "
        "figure may "
        "still look healthy: compare the slice with the others on the dashboard's "
        "Guardrails by slice row.",
        for_=hold_for(guardrails),
        labels={"window": window},
    )


def _cost_per_query(window: str) -> list[dict[str, Any]]:
    requests = SLICE_COST_REQUESTS_TOTAL
    return [
        {"record": slice_recording("cost_requests", "increase", window),
         "expr": sum_increase(requests, window, BY_SLICE)},
        {"record": slice_recording("cost_per_query", "ratio_rate", window),
         "expr": ratio(sum_rate(SLICE_COST_USD_TOTAL, window, BY_SLICE),
                       sum_rate(requests, window, BY_SLICE))},
    ]  # fmt: skip


def _cost_ticket(guardrails: GuardrailsConfig, window: str) -> dict[str, Any]:
    budget = guardrails.cost_per_query_max_usd
    mean = slice_recording("cost_per_query", "ratio_rate", window)
    count = slice_recording("cost_requests", "increase", window)
    return alert(
        guardrails,
        "RagSliceCostPerQueryHigh",
        f"{mean} > {budget}\nand on ({BY_SLICE}) {count} >= {guardrails.min_events}",
        severity="ticket",
        summary=f"Mean cost per query is above the {budget:g} USD budget in {WHERE} "
        "({{ $labels.job }})",
        description=f"Priced requests of {WHERE} in the last {window} cost "
        f'{{{{ $value | printf "%.4f" }}}} USD each on average; the budget is {budget:g} USD.',
        labels={"window": window},
    )


def _regeneration_by_intent(guardrails: GuardrailsConfig) -> dict[str, Any]:
    """Production regenerations per request by intent, for windows with enough requests."""
    window = guardrails.window
    regenerations = sum_rate(f"{SLICE_REGENERATIONS_TOTAL}{SERVED}", window, BY_INTENT)
    requests = sum_rate(f"{SLICE_REQUESTS_TOTAL}{SERVED}", window, BY_INTENT)
    enough_requests = sum_increase(f"{SLICE_REQUESTS_TOTAL}{SERVED}", window, BY_INTENT)
    return {
        # An intent without any regeneration records 0, not nothing (as the global ratio).
        "record": regeneration_ratio_by_intent(window),
        "expr": f"(\n  {regenerations}\n  or {requests} * 0\n)\n/\n({requests} > 0)\n"
        f"and on ({BY_INTENT})\n{enough_requests} >= {guardrails.min_events}",
    }


def rows(config: SlicesConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Every guardrail by slice over the longest sample window; the regeneration rate and
    requests by intent, the coverage matrix, and what the slices could not attribute."""
    return [_guardrail_row(guardrails), _slices_row(guardrails)]


def _guardrail_row(guardrails: GuardrailsConfig) -> Row:
    """Each slice's share beside the bound its ticket tests, and the guardrail."""
    window = max(guardrails.sample_windows, key=parse_duration)
    legend = "{{dimension}} {{slice}}"

    def panel(title: str, share: BoundedShare, guardrail: float | None, by: str = "") -> Panel:
        lines = [
            (f"{share.share(window)}{{{JOB}}}", f"{by}{legend}"),
            (f"{share.bound(window)}{{{JOB}}}", f"{by}{legend} bound"),
        ]
        if guardrail is not None:
            lines.append((f"vector({guardrail:g})", "guardrail"))
        return Panel(
            title,
            lines,
            unit="percentunit",
            width=12,
            description=f"Production, last {window}; a slice tickets when its bound crosses "
            f"the guardrail while it has {guardrails.min_events} events in the window.",
        )

    cost = f"{slice_recording('cost_per_query', 'ratio_rate', window)}{{{JOB}}}"
    panels = [
        panel("Faithfulness pass share by slice", FAITHFULNESS, guardrails.faithfulness_min,
              "{{judge}} "),
        panel("False-exclusion rate by slice", FALSE_EXCLUSION, guardrails.false_exclusion_max),
        panel("Latency: share slower than the SLO threshold by slice", LATENCY_SLOW, None,
              "{{stage}} "),
        Panel(
            "Cost per query by slice",
            [(cost, legend), (f"vector({guardrails.cost_per_query_max_usd})", "budget")],
            unit="currencyUSD",
            width=12,
        ),
    ]  # fmt: skip
    return Row("Guardrails by slice", panels)


def _slices_row(guardrails: GuardrailsConfig) -> Row:
    ratio = regeneration_ratio_by_intent(guardrails.window)
    coverage = (
        f"sum by (intent, document_type) "
        f"(increase({COVERAGE_REQUESTS_TOTAL}{{{JOB}}}[{guardrails.baseline}]))"
    )
    panels = [
        Panel(
            "Regeneration rate by intent (production)",
            [(f"sum by (intent) ({ratio}{{{JOB}}})", "{{intent}}")],
            unit="percentunit",
            width=8,
        ),
        Panel(
            "Requests by intent and variant",
            [(panel_rate(SLICE_REQUESTS_TOTAL, by="intent, variant"), "{{intent}} {{variant}}")],
            unit="reqps",
            width=8,
        ),
        Panel(
            "Slices not attributed",
            [
                (
                    f"sum (increase({SLICE_UNMATCHED_FEEDBACK_TOTAL}{{{JOB}}}[{RATE}]))",
                    "regenerate events without their trace",
                ),
                (
                    f"sum (increase({SLICE_EVICTED_TRACES_TOTAL}{{{JOB}}}[{RATE}]))",
                    "traces evicted before feedback_ttl_s",
                ),
            ],
            unit="none",
            width=8,
        ),
        Panel(
            f"Coverage: production requests by intent x document type (last {guardrails.baseline})",
            [(coverage, "{{intent}} x {{document_type}}")],
            unit="none",
            kind="bargauge",
            description="One bar per cell of the configured intents x document types; a cell "
            "at 0 is a query intent the corpus never answered with that document type.",
            width=24,
        ),
    ]
    return Row("Slices (intent, document type)", panels)
