"""The evaluations detector's rules and panels: per evaluation, the share of judged
results that pass, against its guardrail (``min_pass_share``), judged on evidence like
faithfulness (``monitor.contract.rulekit.evidence``): ``RagEvaluationFailing`` fires when even the
upper Wilson bound of the pass share, its z from the severity's budget in
``guardrails.false_alerts_per_week``, is below the guardrail, on each of
``guardrails.sample_windows``, once ``guardrails.min_events`` results are judged (Wilson's
bound is loose at the edge: two failures alone would pass for evidence). The bound rests
on the count of judged results, not of requests: an evaluator that samples 2% of the
requests gets the bound 2% of them make.

The recordings are kept apart by ``evaluation`` (never ``other`` or ``none``: a fold of
unrelated names has no guardrail). One rule per window and distinct (guardrail,
severity): the section's defaults cover every evaluation that sets neither, so the rule
exists before any name is configured and a name added later needs no new rule.

An evaluation set ``compare_with_review`` has its pass share corrected by the review's
random stratum as faithfulness has (``monitor.contract.rulekit.prediction_powered``): its alert
tests the corrected bound once ``guardrails.review_correction.min_random_reviews`` random
reviews carry its result, and ``RagJudgeBiased`` tickets when it disagrees with them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from detectors.evaluations.config import EvaluationsConfig
from detectors.evaluations.names import (
    FAILED,
    JUDGED,
    RESULTS_TOTAL,
    SCORE,
    judged_count,
    pass_ratio,
    pass_upper_bound,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import EVALUATION_AGREEMENT_TOTAL, REQUESTS_TOTAL
from monitor.contract.rulekit.corrected_rules import BIAS_ALERT, CorrectedShare, CorrectionEvidence
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
    VARIANT,
    alert,
    panel_increase,
    panel_rate,
    panel_recorded,
    percent,
    production,
    recorded_value,
)
from monitor.contract.variants import NONE, OTHER

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
ALERT = "RagEvaluationFailing"
BY = "job, evaluation"
FOLDED = f"{OTHER}|{NONE}"
CORRECTED = CorrectedShare(
    prefix="evaluation",
    agreement=EVALUATION_AGREEMENT_TOTAL,
    judge_yes='outcome="pass"',
    judged_share=pass_ratio,
    judged_count=judged_count,
    by=BY,
    matcher=f', evaluation!="{OTHER}"',
)


def _selector(selector: str) -> str:
    """``selector`` of production results of named evaluations (not other or none)."""
    return production(f'{selector[:-1]}, evaluation!~"{FOLDED}"}}')


def pass_share(severity: str) -> BoundedShare:
    """The pass share of each evaluation with its upper bound at ``severity``'s z."""
    return BoundedShare(
        hits=_selector(FAILED),
        events=_selector(JUDGED),
        share=pass_ratio,
        count=judged_count,
        bound=functools.partial(pass_upper_bound, severity),
        side="upper",
        complement=True,
        by=BY,
    )


def corrected_bound(severity: str, window: str) -> str:
    """The recorded upper bound of the debiased pass share at ``severity``'s z."""
    return CORRECTED.debiased(window, f"upper_bound_{severity}")


def guardrails_of(config: EvaluationsConfig) -> dict[tuple[float, str], str]:
    """Per distinct (min pass share, severity), the ``evaluation`` matcher of its rule:
    the section's defaults take every name but those that set their own."""
    default: tuple[float, str] = (config.min_pass_share, config.severity)
    own: dict[tuple[float, str], list[str]] = {}
    for name in config.evaluations:
        guardrail = config.guardrail(name)
        if guardrail != default:
            own.setdefault(guardrail, []).append(name)
    excluded = "|".join([OTHER, NONE, *(n for names in own.values() for n in names)])
    matchers: dict[tuple[float, str], str] = {default: f'evaluation!~"{excluded}"'}
    matchers.update({key: f'evaluation=~"{"|".join(names)}"' for key, names in own.items()})
    return matchers


def rules(config: EvaluationsConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """Per window: pass share, judged count, the bound of each severity in use, the alerts."""
    matchers = guardrails_of(config)
    severities = sorted({severity for _, severity in matchers})
    correction = guardrails.review_correction
    bias_windows = window_z(guardrails, "ticket", [correction.window], sides=2)
    recording = CORRECTED.review_recording(correction.window, bias_windows[0][1])
    alerting: list[dict[str, Any]] = []
    derivations: list[str] = []
    for severity in severities:
        windows = window_z(guardrails, severity, guardrails.sample_windows)
        derivations += derivation(f"{ALERT} ({severity})", windows, "upper bound of the pass share")
        for window, z in windows:
            records = pass_share(severity).recording(window, z)
            recording += records if severity == severities[0] else records[2:]
    zs = {s: dict(window_z(guardrails, s, guardrails.sample_windows)) for s in severities}
    for window in guardrails.sample_windows:
        bounds = [(corrected_bound(s, window), zs[s][window]) for s in severities]
        recording += CORRECTED.recording(window, correction.window, bounds)
    for (minimum, severity), matcher in matchers.items():
        for window, z in window_z(guardrails, severity, guardrails.sample_windows):
            alerting.append(_alert(guardrails, (window, z), (minimum, severity), matcher))
    alerting.append(
        CORRECTED.bias_alert(
            guardrails,
            "the evaluation {{ $labels.evaluation }}",
            ("job", "evaluation"),
            "Its own pass share, and its alert while reviews are few, are off by as much.",
        )
    )
    derivations += derivation(
        f"{BIAS_ALERT} (evaluations)", bias_windows, "two-sided bound of the judge's bias"
    )
    return RuleFragment(
        recording=recording,
        alerting=alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivations,
    )


def _alert(
    guardrails: GuardrailsConfig,
    window_and_z: tuple[str, float],
    guardrail: tuple[float, str],
    matcher: str,
) -> dict[str, Any]:
    (window, z), (minimum, severity) = window_and_z, guardrail
    labels = ("job", "evaluation")
    judged = recorded_value(judged_count(window), labels, 'printf "%.0f"')
    point = recorded_value(pass_ratio(window), labels, "humanizePercentage")
    judge_bound, bound = pass_upper_bound(severity, window), corrected_bound(severity, window)
    evidence = CorrectionEvidence(
        guardrails.review_correction, judged_count(window), guardrails.min_events
    )
    note = CORRECTED.bound_note(
        window, evidence, bound=bound, judge_bound=judge_bound, labels=labels
    )
    shares = CORRECTED.page_expr(
        f"{judge_bound}{{{matcher}}}", f"{bound}{{{matcher}}}", minimum, evidence
    )
    return alert(
        guardrails,
        ALERT,
        f"(\n{shares}\n)\nand on (job, evaluation)\n"
        f"{judged_count(window)} >= {guardrails.min_events}",
        severity="page" if severity == "page" else "ticket",
        summary=f"Fewer than {percent(minimum)} of {{{{ $labels.evaluation }}}} results pass "
        "({{ $labels.job }})",
        description=f"Over the last {window}, {point} of {judged} judged "
        f"{{{{ $labels.evaluation }}}} results passed ({pass_ratio(window)}, "
        f"{judged_count(window)}); even the {confidence(z)} upper bound of that share, "
        f"{{{{ $value | humanizePercentage }}}} ({note}), is below the guardrail of "
        f"{percent(minimum)}.",
        for_=hold_for(guardrails),
        labels={"window": window},
    )


def rows(config: EvaluationsConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Per evaluation the pass share beside its bound, the judged counts (and the
    expected count from each sample rate), outcomes, and the score heatmap; for those
    compared with review, the share corrected by reviews, the reviews and the bias."""
    severity = sorted({severity for _, severity in guardrails_of(config)})[0]
    shares = [
        query
        for window in guardrails.sample_windows
        for query in (
            (panel_recorded(pass_ratio(window)), f"{{{{evaluation}}}} pass share {window}"),
            (
                panel_recorded(pass_upper_bound(severity, window)),
                f"{{{{evaluation}}}} upper bound {window}",
            ),
        )
    ]
    counts = [
        (panel_recorded(judged_count(window)), f"{{{{evaluation}}}} judged in {window}")
        for window in guardrails.sample_windows
    ]
    # What each evaluation's sample_rate leads one to expect: results short of it mean the
    # evaluator judges less than configured, and the bound rests on less evidence.
    first = guardrails.sample_windows[0]
    requests = f"sum(increase({REQUESTS_TOTAL}{{{JOB}, {VARIANT}}}[{first}]))"
    counts += [
        (f"{rule.sample_rate:g} * {requests}", f"{name} expected in {first}")
        for name, rule in config.evaluations.items()
    ]
    panels = [
        Panel(
            "Pass share and its upper bound, per evaluation",
            shares,
            unit="percentunit",
            description="Share of judged results that pass their evaluation's rule, and the "
            "upper bound RagEvaluationFailing tests against the evaluation's guardrail.",
        ),
        Panel(
            "Judged results per window (the evidence)",
            counts,
            description="Results the bounds rest on (production traffic), beside what each "
            "evaluation's sample_rate expects of the requests.",
        ),
        Panel(
            "Results by evaluation and outcome",
            [
                (
                    panel_rate(RESULTS_TOTAL, by="evaluation, outcome", guardrail=True),
                    "{{evaluation}} {{outcome}}",
                )
            ],
            unit="ops",
        ),
        Panel(
            "Score distribution",
            [(panel_increase(f"{SCORE}_bucket", by="le"), "{{le}}")],
            kind="heatmap",
        ),
    ]
    panels += CORRECTED.panels(
        guardrails.sample_windows,
        guardrails.review_correction,
        judge_bound=functools.partial(pass_upper_bound, severity),
        legend="{{evaluation}} ",
    )
    return [Row("Evaluations (your evaluators' verdicts)", panels)]
