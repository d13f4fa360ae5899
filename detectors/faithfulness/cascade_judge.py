"""The ``cascade`` judge: a local judge for every answer, an LLM for the uncertain ones.

The first judge (``cascade.first``: HHEM, or a token-level classifier) scores every
sampled pair. A pair whose first score falls in the uncertain band
``[band_low, band_high]`` (which holds the threshold: there the first verdict is in
doubt) goes to the second judge, the LLM judge of ``llm_judge``, when both the rate
limit (``max_per_second``, a token bucket) and the spend budget (``usd_per_hour``)
admit it; otherwise it keeps the first verdict and is counted refused. The final
result is the second judge's when it gave a score, else the first's (with the first's
spans); ``JudgeResult.tiers`` records each tier that judged, the first always (its
``escalated`` says the pair was in the band), the second when it was asked.

The budget (``SpendBudget``, ``cascade_budget.py``) never lets the spend counted in
``rag_judge_cost_usd_total`` exceed ``usd_per_hour`` over any window of an hour: how, and
why a sliding window, is said there. The budget is per process: N sidecar replicas
(inline) or N scorers (``judge_location: kafka``) spend up to N times ``usd_per_hour``:
set the total / N.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

import structlog
from prometheus_client import Counter, Gauge

from detectors.faithfulness.cascade_budget import (
    WINDOW_S,
    PairCostBound,
    RateLimit,
    SpendBudget,
    reply_token_bound,
)
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_contract import (
    Judge,
    JudgeOpener,
    JudgePair,
    JudgeResult,
    JudgeUnavailable,
    WorkerStats,
    batch_size_for,
)
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.judge_metrics import judge_metric
from detectors.faithfulness.llm_judge import load_llm_judge
from detectors.faithfulness.names import (
    JUDGE_BUDGET_USD,
    JUDGE_ESCALATIONS_TOTAL,
    JUDGE_TIER_VERDICTS_TOTAL,
)
from monitor.contract.trace import TierVerdict

if TYPE_CHECKING:
    from monitor.contract.sidecar_registry import SidecarRegistry

log = structlog.get_logger("rag_monitor.faithfulness")

Tier = Literal["first", "second"]
TierOutcome = Literal["supported", "unsupported", "no_claims", "error"]
TIER_OUTCOMES: tuple[TierOutcome, ...] = ("supported", "unsupported", "no_claims", "error")
Escalation = Literal["sent", "refused_budget", "refused_rate"]
ESCALATIONS: tuple[Escalation, ...] = ("sent", "refused_budget", "refused_rate")


class CascadeMetrics:
    """``rag_judge_tier_verdicts_total``, ``rag_judge_escalations_total`` and
    ``rag_judge_budget_usd`` of one cascade."""

    def __init__(
        self,
        registry: SidecarRegistry | None,
        first: str,
        second: str,
        budget: SpendBudget | None = None,
    ) -> None:
        verdicts = judge_metric(
            registry,
            Counter,
            JUDGE_TIER_VERDICTS_TOTAL,
            "A judge cascade's verdicts by tier (first: every answer; second: the uncertain "
            "ones it was sent), the tier's judge (its identity) and verdict (supported, "
            "unsupported at the threshold; no_claims; error).",
            ["judge", "tier", "verdict"],
        )
        self._verdicts = {
            (tier, outcome): verdicts.labels(judge, tier, outcome)
            for tier, judge in (("first", first), ("second", second))
            for outcome in TIER_OUTCOMES
        }
        escalations = judge_metric(
            registry,
            Counter,
            JUDGE_ESCALATIONS_TOTAL,
            "Answers a judge cascade's first judge was uncertain of (score in the band), by "
            "what became of them: sent to the second judge (its identity: judge), or kept "
            "the first verdict because the spend budget (refused_budget) or the rate "
            "(refused_rate) did not admit them.",
            ["judge", "outcome"],
        )
        self._escalations = {o: escalations.labels(second, o) for o in ESCALATIONS}
        budget_usd = judge_metric(
            registry,
            Gauge,
            JUDGE_BUDGET_USD,
            "A judge cascade's spend budget for its second judge (judge), in USD over the "
            "sliding hour: spent (charged within it), reserved (cost bounds of answers in "
            "flight), limit (usd_per_hour).",
            ["judge", "state"],
        )
        if budget is not None:
            budget_usd.labels(second, "spent").set_function(budget.spent)
            budget_usd.labels(second, "reserved").set_function(budget.reserved)
            budget_usd.labels(second, "limit").set(budget.limit)

    def verdict(self, tier: Tier, result: JudgeResult, threshold: float) -> None:
        self._verdicts[tier, tier_outcome(result, threshold)].inc()

    def escalation(self, outcome: Escalation) -> None:
        self._escalations[outcome].inc()


def tier_outcome(result: JudgeResult, threshold: float) -> TierOutcome:
    """A tier's verdict as counted: supported or unsupported at the threshold."""
    if result.outcome == "scored" and result.score is not None:
        return "supported" if result.score >= threshold else "unsupported"
    return "no_claims" if result.outcome == "no_claims" else "error"


class CascadeJudge:
    """The first judge on every pair, the second on the uncertain ones it may afford."""

    def __init__(
        self,
        first: Judge,
        second: Judge,
        *,
        name: str,
        band: tuple[float, float],
        threshold: float,
        budget: SpendBudget,
        rate: RateLimit,
        cost_bound: Callable[[JudgePair], float],
        metrics: CascadeMetrics,
        batch_size: int,
    ) -> None:
        self.name = name
        self.batch_size = batch_size
        self.first = first
        self.second = second
        self._low, self._high = band
        self._threshold = threshold
        self.budget = budget
        self._rate = rate
        self.cost_bound = cost_bound
        self._metrics = metrics
        # Raised when a batch cost more than its bounds (an endpoint ignoring max_tokens):
        # later bounds are scaled by the worst ratio seen.
        self.bound_factor = 1.0

    def in_band(self, result: JudgeResult) -> bool:
        """The first judge is unsure: a score in [band_low, band_high]."""
        return result.outcome == "scored" and (
            result.score is not None and self._low <= result.score <= self._high
        )

    def score(self, pairs: Sequence[JudgePair]) -> list[JudgeResult]:
        firsts = self.first.score(pairs)
        results: list[JudgeResult] = []
        sent: list[tuple[int, int, float]] = []  # (index, reservation, bound)
        for index, (pair, first) in enumerate(zip(pairs, firsts, strict=True)):
            self._metrics.verdict("first", first, self._threshold)
            uncertain = self.in_band(first)
            tier = TierVerdict(self.first.name, first.score, uncertain)
            results.append(replace(first, tiers=(tier,)))
            if not uncertain:
                continue
            bound = self.cost_bound(pair) * self.bound_factor
            reservation = self.budget.reserve(bound)
            if reservation is None:
                self._metrics.escalation("refused_budget")
            elif not self._rate.take():
                self.budget.release(reservation)
                self._metrics.escalation("refused_rate")
            else:
                self._metrics.escalation("sent")
                sent.append((index, reservation, bound))
        if sent:
            self._second_tier(pairs, results, sent)
        return results

    def _second_tier(
        self,
        pairs: Sequence[JudgePair],
        results: list[JudgeResult],
        sent: list[tuple[int, int, float]],
    ) -> None:
        charged = self.budget.charged
        try:
            seconds = self.second.score([pairs[index] for index, _, _ in sent])
        except BaseException:
            # A judge that raised may leave requests running that charge later: their
            # bounds are charged now, so the budget errs on the side of spending less.
            for _, reservation, bound in sent:
                self.budget.charge(bound)
                self.budget.release(reservation)
            raise
        for _, reservation, _ in sent:  # every reply is charged: the bounds go
            self.budget.release(reservation)
        self._check_bounds(self.budget.charged - charged, sum(b for _, _, b in sent))
        for (index, _, _), second in zip(sent, seconds, strict=True):
            self._metrics.verdict("second", second, self._threshold)
            first = results[index]
            tiers = (*first.tiers, TierVerdict(self.second.name, second.score, False))
            final = second if second.outcome == "scored" else first
            results[index] = replace(final, tiers=tiers)

    def _check_bounds(self, actual: float, bounds: float) -> None:
        if bounds <= 0 or actual <= bounds:
            return
        self.bound_factor *= actual / bounds
        log.warning(
            "faithfulness_cascade_cost_over_bound",
            judge=self.second.name,
            ratio=round(actual / bounds, 3),
            how_to_fix="check that the endpoint honours max_tokens (llm_judge."
            "max_output_tokens); later answers are reserved at the higher cost",
        )

    def close(self) -> None:
        try:
            self.first.close()
        finally:
            self.second.close()


def load_cascade_judge(
    config: FaithfulnessConfig,
    *,
    registry: SidecarRegistry | None,
    on_stats: Callable[[WorkerStats], None],
    stopping: threading.Event,
    open_first: JudgeOpener,
    window_s: float = WINDOW_S,
    clock: Callable[[], float] = time.monotonic,
) -> CascadeJudge:
    """The LLM judge (first: it needs no model, and a missing key stops here before a
    model loads), then the first judge, opened by ``open_first`` (the sidecar's
    ``open_judge``) as if configured alone. ``window_s`` and
    ``clock`` are for tests: the budget is ``usd_per_hour`` over an hour of
    ``time.monotonic``."""
    cascade = config.cascade
    llm = config.llm_judge
    # The config requires a model, a budget and a price with this judge.
    assert llm.model is not None
    assert cascade.usd_per_hour is not None
    prices = llm.prices()
    if prices is None:
        raise JudgeUnavailable(
            "faithfulness_cascade_unpriced",
            f"set llm_judge.input_usd_per_1m_tokens and output_usd_per_1m_tokens: the "
            f"budget needs a price for {llm.model}",
        )
    max_tokens = reply_token_bound(llm)
    second_config = config.model_copy(
        update={
            "judge": "openai_compatible",
            "llm_judge": llm.model_copy(update={"max_output_tokens": max_tokens}),
        }
    )
    budget = SpendBudget(cascade.usd_per_hour * window_s / WINDOW_S, window_s, clock=clock)
    second = load_llm_judge(
        second_config,
        registry=registry,
        on_stats=on_stats,
        stopping=stopping,
        on_cost=budget.charge,
    )
    try:
        first = open_first(
            config.model_copy(update={"judge": cascade.first}),
            registry=registry,
            on_stats=on_stats,
            stopping=stopping,
        )
    except BaseException:
        second.close()
        raise
    name = judge_identity(config)
    log.info(
        "faithfulness_cascade_ready",
        judge=name,
        band=[cascade.band_low, cascade.band_high],
        max_per_second=cascade.max_per_second,
        usd_per_hour=cascade.usd_per_hour,
        max_output_tokens=max_tokens,
    )
    return CascadeJudge(
        first,
        second,
        name=name,
        band=(cascade.band_low, cascade.band_high),
        threshold=config.threshold,
        budget=budget,
        rate=RateLimit(cascade.max_per_second, clock=clock),
        cost_bound=PairCostBound(llm.model, llm.max_claims, max_tokens, prices),
        metrics=CascadeMetrics(registry, first.name, second.name, budget),
        batch_size=batch_size_for(config),
    )
