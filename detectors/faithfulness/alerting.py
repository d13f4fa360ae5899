"""The faithfulness detector's rules and panels: the share of sampled answers that HHEM
scores at or above the threshold, against ``guardrails.faithfulness_min``, judged on
evidence: the page fires when even the upper Wilson bound of the share (its z from the
page budget, ``monitor.contract.rulekit.evidence``) is below the guardrail, on each of
``guardrails.sample_windows`` (a short window for a large drop, a long one for a small).

Once the review's random stratum holds ``guardrails.review_correction.min_random_reviews``
reviews over its window, the page tests the judge's share corrected by them instead
(``monitor.contract.rulekit.prediction_powered``): the judge's errors no longer move the bound.
``RagJudgeBiased`` tickets when the judge and the reviewers disagree on the same items."""

from __future__ import annotations

from pathlib import Path

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.names import (
    BELOW_THRESHOLD_TOTAL,
    EVALUATIONS_TOTAL,
    FAITHFULNESS_SCORE,
    SCORED,
    pass_ratio,
    pass_upper_bound,
    scored_count,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import JUDGE_AGREEMENT_TOTAL, JUDGE_INFO
from monitor.contract.rulekit.corrected_rules import CorrectedShare, CorrectionEvidence
from monitor.contract.rulekit.evidence import (
    BoundedShare,
    confidence,
    derivation,
    hold_for,
    window_z,
)
from monitor.contract.rulekit.fragments import Annotation, Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    JOB,
    alert,
    panel_increase,
    panel_rate,
    panel_ratio,
    panel_recorded,
    percent,
    production,
    recorded_value,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
# Each judge (its identity, the label judge) has its own shares, reviews and bounds, kept
# to the judges that run now: a replaced judge's series stop when it stops running,
# and a new one's correction starts from its own reviews.
BY_JUDGE = "job, judge"
LABELS = ("job", "judge")
CURRENT_JUDGES = f"group by ({BY_JUDGE}) ({JUDGE_INFO})"
# How far back the judge-change annotation looks: a new judge is marked for this long.
_CHANGE_MARK = "10m"
PASS_SHARE = BoundedShare(
    hits=production(BELOW_THRESHOLD_TOTAL),
    events=production(SCORED),
    share=pass_ratio,
    count=scored_count,
    bound=pass_upper_bound,
    side="upper",
    complement=True,
    by=BY_JUDGE,
    only=CURRENT_JUDGES,
)
CORRECTED = CorrectedShare(
    prefix="faithfulness",
    agreement=JUDGE_AGREEMENT_TOTAL,
    judge_yes='hhem="supported"',
    judged_share=pass_ratio,
    judged_count=scored_count,
    by=BY_JUDGE,
    only=CURRENT_JUDGES,
)


def rules(config: FaithfulnessConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """The reviews' shares and the judge's bias; per window the pass share, the scored
    count, its upper bound, the corrected share and its bound, and the page; the ticket."""
    minimum = guardrails.faithfulness_min
    correction = guardrails.review_correction
    windows = window_z(guardrails, "page", guardrails.sample_windows)
    bias_windows = window_z(guardrails, "ticket", [correction.window], sides=2)
    recording = CORRECTED.review_recording(correction.window, bias_windows[0][1])
    alerting = []
    for window, z in windows:
        recording += PASS_SHARE.recording(window, z)
        bound = CORRECTED.debiased(window, "upper_bound")
        recording += CORRECTED.recording(window, correction.window, [(bound, z)])
        evidence = CorrectionEvidence(correction, scored_count(window), guardrails.min_events)
        note = CORRECTED.bound_note(
            window, evidence, bound=bound, judge_bound=pass_upper_bound(window), labels=LABELS
        )
        scored = recorded_value(scored_count(window), LABELS, 'printf "%.0f"')
        point = recorded_value(pass_ratio(window), LABELS, "humanizePercentage")
        alerting.append(
            alert(
                guardrails,
                "RagFaithfulnessLow",
                CORRECTED.page_expr(pass_upper_bound(window), bound, minimum, evidence),
                severity="page",
                summary=f"Fewer than {percent(minimum)} of sampled answers are faithful "
                "({{ $labels.job }})",
                description=f"Over the last {window}, {point} of {scored} answers scored by "
                "the judge {{ $labels.judge }} "
                f"({pass_ratio(window)}, {scored_count(window)}) reached the "
                f"faithfulness threshold; even the {confidence(z)} upper bound of the pass "
                f"share, {{{{ $value | humanizePercentage }}}} ({note}), is below the "
                f"guardrail of {percent(minimum)}. Answers are drifting away from the "
                "retrieved evidence.",
                for_=hold_for(guardrails),
                labels={"window": window},
            )
        )
    alerting.append(
        CORRECTED.bias_alert(
            guardrails,
            "the faithfulness judge",
            LABELS,
            "Its own pass share, and the page while reviews are few, are off by as much.",
        )
    )
    return RuleFragment(
        recording=recording,
        alerting=alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=[
            *derivation("RagFaithfulnessLow", windows, "upper bound of the pass share"),
            *derivation("RagJudgeBiased", bias_windows, "two-sided bound of the judge's bias"),
        ],
    )


def rows(config: FaithfulnessConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Per window the pass share beside its upper bound and the guardrail, the scored
    counts they rest on, the score heatmap, evaluations by outcome; the judge-only share
    beside the one corrected by reviews, the random reviews and the judge's bias."""
    minimum = f"vector({guardrails.faithfulness_min})"
    shares = [
        query
        for window in guardrails.sample_windows
        for query in (
            (panel_recorded(pass_ratio(window)), f"pass share {window}"),
            (panel_recorded(pass_upper_bound(window)), f"upper bound {window}"),
        )
    ]
    counts = [
        (panel_recorded(scored_count(window)), f"scored in {window}")
        for window in guardrails.sample_windows
    ]
    # The raw share of the dashboard's $variant beside the production recordings.
    scored = panel_rate(EVALUATIONS_TOTAL, 'outcome="scored"', guardrail=True)
    chosen = "1 - " + panel_ratio(panel_rate(BELOW_THRESHOLD_TOTAL, guardrail=True), scored)
    panels = [
        Panel(
            "Pass share and its upper bound",
            [*shares, (chosen, "pass share ($variant)"), (minimum, "guardrail")],
            unit="percentunit",
            description="Share of scored answers at or above the HHEM threshold, and the upper "
            "bound the page tests: it fires when the bound is below the guardrail.",
        ),
        Panel(
            "Scored answers per window (the evidence)",
            counts,
            description="Answers the bounds rest on (production traffic).",
        ),
        Panel(
            "Score distribution",
            [(panel_increase(f"{FAITHFULNESS_SCORE}_bucket", by="le", guardrail=True), "{{le}}")],
            kind="heatmap",
        ),
        Panel(
            "Evaluations by outcome",
            [(panel_rate(EVALUATIONS_TOTAL, by="outcome", guardrail=True), "{{outcome}}")],
            unit="ops",
        ),
    ]
    panels += CORRECTED.panels(
        guardrails.sample_windows,
        guardrails.review_correction,
        judge_bound=pass_upper_bound,
        legend="{{judge}} ",
        guardrail=guardrails.faithfulness_min,
    )
    info = f"max by (judge) ({JUDGE_INFO}{{{JOB}}}"  # closed below
    change = Annotation(
        name="Judge changes",
        expr=f"{info})\nunless\n{info} offset {_CHANGE_MARK})",
        title="faithfulness judge {{judge}}",
        text="a judge first seen: its verdicts are corrected by its own reviews; until "
        f"{guardrails.review_correction.min_random_reviews} of them, the page tests its own "
        "bound",
        tags="judge",
    )
    return [Row("Faithfulness (sampled, by judge)", panels, annotations=[change])]
