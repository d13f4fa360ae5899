"""The filter-exclusion detector's series in ``rag-monitor rules backtest --simulate``: one
labelled query a minute, 0.01 of them falsely excluded, 0.06 during a ``false_exclusion``
incident; by slice too when slices are configured."""

from __future__ import annotations

import numpy as np

from detectors.filter_exclusion.config import FilterExclusionConfig
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import (
    ELIGIBLE_QUERIES_TOTAL,
    FALSE_EXCLUSIONS_TOTAL,
    SLICE_EXCLUSION_QUERIES_TOTAL,
    SLICE_FALSE_EXCLUSIONS_TOTAL,
)
from monitor.contract.rulekit.simulation import SimulatedWorld

HEALTHY_FALSE_EXCLUSION = 0.01
INCIDENT_FALSE_EXCLUSION = 0.06


def series(
    config: FilterExclusionConfig, guardrails: GuardrailsConfig, world: SimulatedWorld
) -> None:
    """Eligible labelled queries and false exclusions each minute."""
    labelled = np.ones(world.steps, dtype=np.int64)
    world.samples.add(ELIGIBLE_QUERIES_TOTAL, world.labels, labelled)
    share = world.rate("false_exclusion", HEALTHY_FALSE_EXCLUSION, INCIDENT_FALSE_EXCLUSION)
    world.samples.add(FALSE_EXCLUSIONS_TOTAL, world.labels, world.rng.binomial(labelled, share))
    names = (SLICE_EXCLUSION_QUERIES_TOTAL, SLICE_FALSE_EXCLUSIONS_TOTAL)
    world.add_slices(names, {}, labelled, share)
