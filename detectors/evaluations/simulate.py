"""The evaluations detector's series in ``rag-monitor rules backtest --simulate``: each
configured evaluation judges its ``sample_rate`` of the requests with a score normal around
0.9 (sd 0.1; 0.6 during an ``evaluation`` incident), 1% of them errors. A result passes a
``score_min`` rule at or above it, a ``score_max`` rule when ``1 - score`` is at or below
it, a ``labels`` rule as a score at or above 0.7 would. An evaluation set
``compare_with_review`` is reviewed as the faithfulness judge is (``reviews``): its pass
share reads the world's ``judge_bias`` above what the reviewers find."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from detectors.evaluations.config import EvaluationRule, EvaluationsConfig
from detectors.evaluations.names import RESULTS_TOTAL
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import EVALUATION_AGREEMENT_TOTAL
from monitor.contract.rulekit.simulation import SimulatedWorld, reviews

HEALTHY_SCORE = 0.9
INCIDENT_SCORE = 0.6
SCORE_SD = 0.1
ERROR_SHARE = 0.01
LABEL_THRESHOLD = 0.7  # where a labels rule's verdict turns, on the simulated score


@dataclass(frozen=True)
class SimulatedEvaluation:
    """One configured evaluation: the share of requests it judges, and where a result
    passes (``score_min``; ``score_max`` of ``1 - score``)."""

    sample_rate: float
    score_min: float = LABEL_THRESHOLD
    score_max: float | None = None

    @classmethod
    def of(cls, rule: EvaluationRule) -> SimulatedEvaluation:
        if rule.score_max is not None:
            return cls(rule.sample_rate, score_max=rule.score_max)
        if rule.score_min is not None:
            return cls(rule.sample_rate, score_min=rule.score_min)
        return cls(rule.sample_rate)

    def pass_share(self, mean: NDArray[np.float64]) -> NDArray[np.float64]:
        """The share of judged results that pass at each minute's mean score."""
        cdf = np.vectorize(NormalDist().cdf)
        if self.score_max is not None:
            share: NDArray[np.float64] = cdf((self.score_max - (1 - mean)) / SCORE_SD)
        else:
            share = 1 - cdf((self.score_min - mean) / SCORE_SD)
        return share


def series(config: EvaluationsConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    """Each configured evaluation's results by outcome, each minute."""
    mean = world.rate("evaluation", HEALTHY_SCORE, INCIDENT_SCORE)
    for name, rule in config.evaluations.items():
        evaluation = SimulatedEvaluation.of(rule)
        judged = world.rng.binomial(world.requests, evaluation.sample_rate)
        errors = world.rng.binomial(judged, ERROR_SHARE)
        share = evaluation.pass_share(mean)
        passed = world.rng.binomial(judged - errors, share)
        outcomes = (("pass", passed), ("fail", judged - errors - passed), ("error", errors))
        labels = {**world.labels, "evaluation": name}
        for outcome, counts in outcomes:
            world.samples.add(RESULTS_TOTAL, {**labels, "outcome": outcome}, counts)
        if rule.compare_with_review:
            reviewed = {**world.target, "stratum": "random", "evaluation": name}
            truth = np.clip(share - world.world.judge_bias, 0.0, 1.0)
            for (judge, human), count in reviews(world, truth, share).items():
                verdicts = {"outcome": "pass" if judge else "fail", "human": human}
                world.samples.add(EVALUATION_AGREEMENT_TOTAL, {**reviewed, **verdicts}, count)
