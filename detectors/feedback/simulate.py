"""The feedback detector's series in ``rag-monitor rules backtest --simulate``: 0.05 of
the requests are regenerated, twice as many during a ``regeneration`` incident."""

from __future__ import annotations

from detectors.feedback.config import FeedbackConfig
from detectors.feedback.names import FEEDBACK_EVENTS_TOTAL
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.simulation import SimulatedWorld

HEALTHY_REGENERATION = 0.05


def series(config: FeedbackConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    """Regenerate feedback events each minute."""
    share = world.rate("regeneration", HEALTHY_REGENERATION, 2 * HEALTHY_REGENERATION)
    regenerations = world.rng.binomial(world.requests, share)
    world.samples.add(FEEDBACK_EVENTS_TOTAL, {**world.labels, "kind": "regenerate"}, regenerations)
