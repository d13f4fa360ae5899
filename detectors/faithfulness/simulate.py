"""The faithfulness detector's series in ``rag-monitor rules backtest --simulate``: the
sampler scores ``sample_rate`` of the requests, raised to ``min_scored_per_hour`` (when the
section has that floor) from the previous hour's traffic, and at most ``max_per_second``;
0.92 of the scored answers are faithful, 0.75 during a ``faithfulness`` incident. The
judge reads the world's ``judge_bias`` high, and people review a random sample of the
scored answers (``monitor.contract.rulekit.simulation.reviews``). During a ``judge_blind`` incident
the answers fail in a way the judge does not see: people find 0.75 of them faithful, the
judge passes as many as in health (only the corrected bound can tell). During a
``judge_change`` incident another judge (another identity, the same bias) runs: the
first judge's series stop, the second's start from nothing, reviews included, and the
first judge's come back after the incident's end.

With slices configured, the scored answers spread over the intent x document-type cells
(``SimulatedWorld.cells``) and each judge's slice counters add up to its global ones.
During a ``faithfulness_intent`` incident only the first listed intent degrades, to 0.70
faithful: a quarter of the traffic at four intents, the global share 0.865, above the
default guardrail of 0.85."""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.names import BELOW_THRESHOLD_TOTAL, EVALUATIONS_TOTAL
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import (
    JUDGE_AGREEMENT_TOTAL,
    JUDGE_INFO,
    SLICE_FAITHFULNESS_BELOW_TOTAL,
    SLICE_FAITHFULNESS_SCORED_TOTAL,
)
from monitor.contract.rulekit.simulation import (
    STEP_S,
    SimulatedWorld,
    judge_share,
    reviews,
    slice_totals,
)

HEALTHY_FAITHFUL_SHARE = 0.92
INCIDENT_FAITHFUL_SHARE = 0.75
INTENT_INCIDENT_FAITHFUL_SHARE = 0.70
ONE_INTENT = "faithfulness_intent"  # the incident confined to the first listed intent
JUDGE_BLIND = "judge_blind"  # the incident the judge does not see
JUDGE_CHANGE = "judge_change"  # another judge runs
# The two judges of a simulated world: the first, and the one a judge_change brings.
JUDGES = ("hhem/HHEM-2.1-Open@simulated/t0.5", "token/tinylettuce@simulated/t0.5")


def series(config: FaithfulnessConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    """The scored answers and those below the threshold, and the judge against the
    reviewers, each minute."""
    scored = scored_answers(config, world)
    faithful = world.rate("faithfulness", HEALTHY_FAITHFUL_SHARE, INCIDENT_FAITHFUL_SHARE)
    judged = judge_share(world, faithful)
    faithful = np.where(world.during(JUDGE_BLIND), INCIDENT_FAITHFUL_SHARE, faithful)
    cells = world.cells(scored)
    below_cells = _below_by_cell(world, cells, judged)
    below = (
        np.sum(list(below_cells.values()), axis=0)
        if cells
        else world.rng.binomial(scored, 1 - judged)
    )
    agreement = reviews(world, faithful, judged)
    changed = world.during(JUDGE_CHANGE)
    for judge, running in zip(JUDGES, (~changed, changed), strict=True):
        if not running.any():
            continue
        labels = {**world.labels, "judge": judge}
        add = functools.partial(_add_while, world, running)
        world.samples.add_gauge(JUDGE_INFO, {**world.target, "judge": judge}, _while(running))
        add(EVALUATIONS_TOTAL, {**labels, "outcome": "scored"}, scored)
        add(BELOW_THRESHOLD_TOTAL, labels, below)
        for (passed, human), count in agreement.items():
            verdicts = {"hhem": "supported" if passed else "unsupported", "human": human}
            cell = {**world.target, "stratum": "random", **verdicts, "judge": judge}
            add(JUDGE_AGREEMENT_TOTAL, cell, count)
        scored_slices, below_slices = slice_totals(cells), slice_totals(below_cells)
        for (dimension, value), count in scored_slices.items():
            cell = {**world.target, "judge": judge, "dimension": dimension, "slice": value}
            add(SLICE_FAITHFULNESS_SCORED_TOTAL, cell, count)
            add(SLICE_FAITHFULNESS_BELOW_TOTAL, cell, below_slices[dimension, value])


def _below_by_cell(
    world: SimulatedWorld,
    cells: dict[tuple[str, str], NDArray[np.int64]],
    judged: NDArray[np.float64],
) -> dict[tuple[str, str], NDArray[np.int64]]:
    """Scored answers below the threshold per cell: the judge's share everywhere, but the
    first intent's during a ``faithfulness_intent`` incident."""
    if not cells:
        return {}
    first = min(intent for intent, _ in cells)
    degraded = judge_share(
        world, world.rate(ONE_INTENT, HEALTHY_FAITHFUL_SHARE, INTENT_INCIDENT_FAITHFUL_SHARE)
    )
    return {
        (intent, kind): world.rng.binomial(
            count, 1 - (np.minimum(judged, degraded) if intent == first else judged)
        )
        for (intent, kind), count in cells.items()
    }


def _while(running: NDArray[np.bool_]) -> NDArray[np.float64]:
    """1 while the judge runs, absent (NaN: not scraped) otherwise."""
    return np.where(running, 1.0, np.nan)


def _add_while(
    world: SimulatedWorld,
    running: NDArray[np.bool_],
    name: str,
    labels: dict[str, str],
    per_step: NDArray[np.int64],
) -> None:
    """A counter of one judge's process: it counts while the judge runs, starting from 0,
    and is absent (not scraped) while another runs."""
    total = np.cumsum(np.where(running, per_step, 0)).astype(float)
    world.samples.add_gauge(name, labels, total * _while(running))


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
