"""The corrected pass shares as recording rules, the pages' test, the judge-bias ticket
and the dashboard panels: ``monitor.contract.rulekit.prediction_powered`` in PromQL, computed from
the review's agreement counters and a judge's recorded judged counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from monitor.contract.guardrails import GuardrailsConfig, ReviewCorrection
from monitor.contract.rulekit.evidence import hold_for, kept_to
from monitor.contract.rulekit.fragments import Panel
from monitor.contract.rulekit.prediction_powered import PSEUDO_COUNT, RANDOM_STRATUM
from monitor.contract.rulekit.promql import (
    alert,
    panel_recorded,
    percent,
    ratio,
    recorded_value,
    sum_increase,
)

BIAS_ALERT = "RagJudgeBiased"
HUMAN_YES = 'human="yes"'
HUMAN_JUDGED = 'human=~"yes|partly|no"'  # no_claim has nothing to support: left out
BAND_Z = 1.645  # the dashboard's band around the corrected share: a two-sided 90% interval


@dataclass(frozen=True)
class CorrectionEvidence:
    """What a page needs before it tests the corrected bound: ``correction``'s random
    reviews over its window, and ``min_judged`` judged answers (``judged_count``, a
    selector) in the alert's window."""

    correction: ReviewCorrection
    judged_count: str
    min_judged: int

    def clause(self, share: CorrectedShare) -> str:
        """The ``and`` clauses of ``share``'s corrected test."""
        reviewed = share.reviewed(self.correction.window)
        return (
            f"and on ({share.by}) {reviewed} >= {self.correction.min_random_reviews}\n"
            f"and on ({share.by}) {self.judged_count} >= {self.min_judged}"
        )


@dataclass(frozen=True)
class CorrectedShare:
    """Recording rules of a judge's corrected pass share, its bound and its bias.

    ``agreement`` is the review's agreement counter (labels ``stratum``, ``human`` and the
    judge's verdict, matched by ``judge_yes``); ``judged_share`` and ``judged_count`` name
    the judge-only recordings of a window (the pass share and the count of all judged
    answers), kept apart by ``by`` like these. ``prefix`` names the recordings."""

    prefix: str
    agreement: str
    judge_yes: str
    judged_share: Callable[[str], str]
    judged_count: Callable[[str], str]
    by: str = "job"
    matcher: str = ""  # further matchers of the agreement counter
    only: str = ""  # the series the reviews are kept to (``evidence.kept_to``)

    # --- names
    def reviewed(self, window: str) -> str:
        return f"rag:{self.prefix}_reviewed:increase{window}"

    def reviewed_share(self, who: str, window: str) -> str:
        return f"rag:{self.prefix}_reviewed_{who}_pass:ratio{window}"

    def bias(self, window: str, part: str = "ratio") -> str:
        return f"rag:{self.prefix}_judge_bias:{part}{window}"

    def share(self, window: str, part: str = "ratio") -> str:
        return f"rag:{self.prefix}_pass:corrected_{part}{window}"

    def debiased(self, window: str, part: str = "ratio") -> str:
        return f"rag:{self.prefix}_pass:debiased_{part}{window}"

    # --- rules
    def _count(self, matchers: str, window: str) -> str:
        selector = f'{self.agreement}{{stratum="{RANDOM_STRATUM}", {matchers}{self.matcher}}}'
        return sum_increase(selector, window, self.by)

    def review_recording(self, window: str, z: float) -> list[dict[str, Any]]:
        """Over the review ``window``: the random reviews, the human, judge and joint pass
        shares on them, the judge's bias with its two-sided bounds at ``z``, and the
        variance of the bias that the pages' bounds carry (``rectifier_variance`` at
        weight 1)."""
        n = self.reviewed(window)
        human, judge, both = (
            self.reviewed_share(who, window) for who in ("human", "judge", "both")
        )
        shares = {
            human: HUMAN_YES,
            judge: f"{self.judge_yes}, {HUMAN_JUDGED}",
            both: f"{self.judge_yes}, {HUMAN_YES}",
        }
        bias = self.bias(window)
        spread = f"{z:g} * sqrt(clamp_min({judge} + {human} - 2 * {both} - {bias} ^ 2, 0) / {n})"
        return [
            {"record": n, "expr": kept_to(self._count(HUMAN_JUDGED, window), self.by, self.only)},
            *(
                {"record": name, "expr": ratio(self._count(matchers, window), n)}
                for name, matchers in shares.items()
            ),
            {"record": bias, "expr": f"{judge} - {human}"},
            {"record": self.bias(window, "lower_bound"), "expr": f"{bias} - {spread}"},
            {"record": self.bias(window, "upper_bound"), "expr": f"{bias} + {spread}"},
            {"record": self.bias(window, "variance"), "expr": self.rectifier_variance("1", window)},
        ]

    def rectifier_variance(self, weight: str, review_window: str) -> str:
        """PromQL of ``prediction_powered.rectifier_variance``: the variance of the mean
        of (human - ``weight`` * judge) over the reviews, each cell of the judge x person
        table given ``PSEUDO_COUNT``."""
        n = self.reviewed(review_window)
        human, judge, both = (
            self.reviewed_share(who, review_window) for who in ("human", "judge", "both")
        )
        total = f"({n} + {4 * PSEUDO_COUNT:g})"
        human_adjusted = f"({human} * {n} + {2 * PSEUDO_COUNT:g}) / {total}"
        judge_adjusted = f"({judge} * {n} + {2 * PSEUDO_COUNT:g}) / {total}"
        both_adjusted = f"({both} * {n} + {PSEUDO_COUNT:g}) / {total}"
        mean = f"({human_adjusted} - {weight} * {judge_adjusted})"
        square = (
            f"({human_adjusted} - 2 * {weight} * {both_adjusted} + {weight} ^ 2 * {judge_adjusted})"
        )
        return f"clamp_min({square} - {mean} ^ 2, 0) / {n}"

    def recording(
        self, window: str, review_window: str, bounds: list[tuple[str, float]]
    ) -> list[dict[str, Any]]:
        """Over the judged ``window`` and the ``review_window``: the power-tuning weight,
        the corrected share and its standard error; the debiased share (weight 1) and its
        upper bound per (name, z) of ``bounds``, which the pages test. Power tuning leans
        on the reviews as they outnumber the window's judged answers, and the reviews span
        the whole review window: an incident of the last hour barely moves it. At weight 1
        the window's judged share is the base and the reviews only remove the judge's
        bias, so the bound moves with the window."""
        n = self.reviewed(review_window)
        human, judge, both = (
            self.reviewed_share(who, review_window) for who in ("human", "judge", "both")
        )
        big_n, judged = self.judged_count(window), self.judged_share(window)
        pooled = f"({judged} * {big_n} + {judge} * {n}) / ({big_n} + {n})"
        variance = f"{pooled} * (1 - {pooled}) * ({big_n} + {n}) / ({big_n} + {n} - 1)"
        lam, share = self.share(window, "lambda"), self.share(window)
        # A judge whose verdicts do not vary carries no information: weight 0, the
        # review-only estimate (as power tuning gives in the limit).
        weight = (
            f"clamp(\n  ({both} - {human} * {judge})\n"
            f"  / ((1 + {n} / {big_n}) * (({variance}) > 0)),\n  0, 1\n)\n"
            f"or on ({self.by})\n0 * {n} * {big_n}"
        )
        stderr = (
            f"sqrt(\n  {lam} ^ 2 * {judged} * (1 - {judged}) / {big_n}\n"
            f"  + {self.rectifier_variance(lam, review_window)}\n)"
        )
        debiased = self.debiased(window)
        return [
            {"record": lam, "expr": weight},
            {"record": share, "expr": f"{human} + {lam} * ({judged} - {judge})"},
            {"record": self.share(window, "stderr"), "expr": stderr},
            {"record": debiased, "expr": f"{judged} - {self.bias(review_window)}"},
            *(
                {"record": name, "expr": self.debiased_bound(window, review_window, z)}
                for name, z in bounds
            ),
        ]

    def debiased_bound(self, window: str, review_window: str, z: float) -> str:
        """PromQL of ``prediction_powered.debiased_upper_bound``: the window's judged share
        in Agresti and Coull's form at ``z`` (never narrower than its evidence, at 0 and 1
        too) less the judge's bias, plus ``z`` standard errors of both terms."""
        big_n, judged = self.judged_count(window), self.judged_share(window)
        added = f"{z * z:.6g}"
        adjusted = f"({judged} * {big_n} + {z * z / 2:.6g}) / ({big_n} + {added})"
        return (
            f"{adjusted} - {self.bias(review_window)}\n+ {z:g} * sqrt(\n"
            f"  {adjusted} * (1 - {adjusted}) / ({big_n} + {added})\n"
            f"  + {self.bias(review_window, 'variance')}\n)"
        )

    def page_expr(
        self, judge_bound: str, bound: str, guardrail: float, evidence: CorrectionEvidence
    ) -> str:
        """An alert's test of a pass share against ``guardrail``: the corrected (debiased)
        ``bound`` where ``evidence`` holds (the review window's random reviews and the
        alert window's judged answers), or the judge-only ``judge_bound``; the label
        ``estimate`` says which fired (corrected when both do). The corrected bound catches
        a judge that passes too many answers; it carries the reviews' uncertainty about
        the judge's bias, so on a sudden drop the judge's own bound fires first (in the
        backtest, 31 minutes against three hours). A window too thin for the corrected
        bound leaves the judge's own, which is never tighter than its evidence. Both are
        selectors, matchers included."""
        enough = evidence.clause(self)
        corrected_test = f"{bound} < {guardrail}\n{enough}"
        judge_test = (
            f"{judge_bound} < {guardrail}\nunless on ({self.by}) ({bound} < {guardrail} {enough})"
        )
        return (
            f'label_replace(\n{corrected_test},\n"estimate", "corrected", "", ""\n)\nor\n'
            f'label_replace(\n{judge_test},\n"estimate", "judge", "", ""\n)'
        )

    def bound_note(
        self,
        window: str,
        evidence: CorrectionEvidence,
        *,
        bound: str,
        judge_bound: str,
        labels: tuple[str, ...],
    ) -> str:
        """For an alert's description: which bound fired (``page_expr``'s ``estimate``)
        and, when corrected, the corrected share and the reviews it rests on; when the
        judge's own, what the corrected bound would need."""
        review_window = evidence.correction.window
        reviewed = recorded_value(self.reviewed(review_window), labels, 'printf "%.0f"')
        share = recorded_value(self.debiased(window), labels, "humanizePercentage")
        bias = recorded_value(self.bias(review_window), labels, "humanizePercentage")
        return (
            f'{{{{ if eq $labels.estimate "corrected" }}}}{bound}: the judge\'s share less its '
            f"bias of {bias} on {reviewed} random reviews of the last {review_window} is {share}"
            f"{{{{ else }}}}{judge_bound}, the judge's own; the corrected bound needs "
            f"{evidence.correction.min_random_reviews} random reviews in the last "
            f"{review_window} and {evidence.min_judged} judged answers in the window"
            "{{ end }}"
        )

    def bias_alert(
        self, guardrails: GuardrailsConfig, judge: str, labels: tuple[str, ...], how: str
    ) -> dict[str, Any]:
        """The ticket when the judge's bias against the reviewers, on the random items of
        the review window, is beyond ``bias_tolerance`` even at its bound."""
        correction = guardrails.review_correction
        window, tolerance = correction.window, correction.bias_tolerance
        n = self.reviewed(window)
        bias = recorded_value(self.bias(window), labels, "humanizePercentage")
        reviewed = recorded_value(n, labels, 'printf "%.0f"')
        judge_share, human_share = (
            recorded_value(self.reviewed_share(who, window), labels, "humanizePercentage")
            for who in ("judge", "human")
        )
        return alert(
            guardrails,
            BIAS_ALERT,
            f"(\n  {self.bias(window, 'lower_bound')} > {tolerance:g}\n"
            f"  or\n  {self.bias(window, 'upper_bound')} < -{tolerance:g}\n)\n"
            f"and on ({self.by}) {n} >= {correction.min_random_reviews}",
            severity="ticket",
            summary=f"{judge[0].upper()}{judge[1:]} disagrees with the reviewers "
            f"({' '.join(f'{{{{ $labels.{label} }}}}' for label in labels)})",
            description=f"On the {reviewed} random-stratum reviews of the last {window}, "
            f"{judge} passed {judge_share} of the answers and the reviewers {human_share}: a "
            f"bias of {bias} ({self.bias(window)}), beyond {percent(tolerance)} even at its "
            f"bound, {{{{ $value | humanizePercentage }}}}. {how} Recalibrate the judge: "
            "`rag-monitor report review` names the threshold that agrees best with the "
            "reviewers in its calibration table; the corrected pass share stays unbiased "
            "meanwhile.",
            for_=hold_for(guardrails),
            labels={"window": window, "guardrail": self.prefix},
            suspected_cause=False,
        )

    def panels(
        self,
        windows: list[str],
        correction: ReviewCorrection,
        *,
        judge_bound: Callable[[str], str],
        legend: str = "",
        guardrail: float | None = None,
    ) -> list[Panel]:
        """The dashboard's view of the correction: per window the judge-only share beside
        ``judge_bound`` (what the page tests while reviews are few) and the corrected share
        with its 90% band; the random reviews the correction rests on; the judge's bias
        with its bounds against the tolerance. ``legend`` heads each legend (a label
        template); ``guardrail`` draws the share's guardrail when there is one."""
        shares: list[tuple[str, str]] = []
        for window in windows:
            share = panel_recorded(self.share(window))
            stderr = panel_recorded(self.share(window, "stderr"))
            shares += [
                (panel_recorded(self.judged_share(window)), f"{legend}judge-only {window}"),
                (panel_recorded(judge_bound(window)), f"{legend}judge-only bound {window}"),
                (share, f"{legend}corrected {window}"),
                (f"{share} - {BAND_Z:g} * {stderr}", f"{legend}corrected 90% low {window}"),
                (f"{share} + {BAND_Z:g} * {stderr}", f"{legend}corrected 90% high {window}"),
            ]
        if guardrail is not None:
            shares.append((f"vector({guardrail:g})", "guardrail"))
        review_window, tolerance = correction.window, correction.bias_tolerance
        bias = [
            (panel_recorded(self.bias(review_window)), f"{legend}bias"),
            (panel_recorded(self.bias(review_window, "lower_bound")), f"{legend}lower bound"),
            (panel_recorded(self.bias(review_window, "upper_bound")), f"{legend}upper bound"),
            (f"vector({tolerance:g})", "tolerance"),
            (f"vector(-{tolerance:g})", "tolerance"),
        ]
        return [
            Panel(
                "Judge-only vs corrected pass share",
                shares,
                unit="percentunit",
                description="The judge's own pass share with the bound the page tests while "
                f"the last {review_window} hold fewer than {correction.min_random_reviews} "
                "random reviews, and the share corrected by those reviews "
                "(prediction-powered) with its 90% band: the page tests the corrected "
                "share's bound once the reviews are enough.",
            ),
            Panel(
                "Random reviews in the window",
                [(panel_recorded(self.reviewed(review_window)), f"{legend}random reviews")],
                description=f"Random-stratum reviews of the last {review_window} with a "
                "verdict the judge scored (no_claim left out): what the correction and the "
                f"bias rest on; the page uses the correction from "
                f"{correction.min_random_reviews}.",
            ),
            Panel(
                "Judge's bias against the reviewers",
                bias,
                unit="percentunit",
                description="The judge's pass share minus the reviewers' on the same random "
                f"items of the last {review_window}, with its bounds: RagJudgeBiased "
                f"tickets when both bounds lie beyond the tolerance (+-{percent(tolerance)}).",
            ),
        ]
