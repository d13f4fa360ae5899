"""The faithfulness detector's series in ``rag-monitor rules backtest --simulate``: the
sampler scores ``sample_rate`` of the requests, raised to ``min_scored_per_hour`` (when the
section has that floor) from the previous hour's traffic, and at most ``max_per_second``;
0.92 of the scored answers are faithful, 0.75 during a ``faithfulness`` incident. The
judge reads the world's ``judge_bias`` high, and people review a random sample of the
scored answers (``monitor.rulekit.simulation.reviews``). During a ``judge_blind`` incident
the answers fail in a way the judge does not see: people find 0.75 of them faithful, the
judge passes as many as in health (only the corrected bound can tell)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.names import BELOW_THRESHOLD_TOTAL, EVALUATIONS_TOTAL
from monitor.names import JUDGE_AGREEMENT_TOTAL
from monitor.rulekit.simulation import STEP_S, SimulatedWorld, judge_share, reviews

HEALTHY_FAITHFUL_SHARE = 0.92
INCIDENT_FAITHFUL_SHARE = 0.75
JUDGE_BLIND = "judge_blind"  # the incident the judge does not see


def series(config: FaithfulnessConfig, guardrails: Any, world: SimulatedWorld) -> None:
    """The scored answers and those below the threshold, and the judge against the
    reviewers, each minute."""
    scored = scored_answers(config, world)
    world.samples.add(EVALUATIONS_TOTAL, {**world.labels, "outcome": "scored"}, scored)
    faithful = world.rate("faithfulness", HEALTHY_FAITHFUL_SHARE, INCIDENT_FAITHFUL_SHARE)
    judged = judge_share(world, faithful)
    blind = world.during(JUDGE_BLIND)
    faithful = np.where(blind, INCIDENT_FAITHFUL_SHARE, faithful)
    world.samples.add(BELOW_THRESHOLD_TOTAL, world.labels, world.rng.binomial(scored, 1 - judged))
    for (judge, human), count in reviews(world, faithful, judged).items():
        verdicts = {"hhem": "supported" if judge else "unsupported", "human": human}
        labels = {**world.target, "stratum": "random", **verdicts}
        world.samples.add(JUDGE_AGREEMENT_TOTAL, labels, count)


def scored_answers(config: FaithfulnessConfig, world: SimulatedWorld) -> NDArray[np.int64]:
    """Answers the sampler scores each minute: its rate, raised to the hourly floor from
    the previous hour's traffic, capped by its capacity."""
    requests = world.requests
    last_hour = np.convolve(requests, np.ones(60), mode="full")[: len(requests)]
    floor_share = float(config.min_scored_per_hour or 0) / np.maximum(last_hour, 1.0)
    share = np.clip(np.maximum(config.sample_rate, floor_share), 0.0, 1.0)
    drawn = world.rng.binomial(requests, share)
    capacity = int(config.max_per_second * STEP_S)
    scored: NDArray[np.int64] = np.minimum(drawn, capacity)
    return scored
