"""The latency detector's series in ``rag-monitor rules backtest --simulate``: a histogram
per stage with a latency SLO (and ``total``). Latency is lognormal: the total's p95 is
1.2 s (p50 0.53 s), 2.5 s during a ``latency`` incident; every other stage's p95 is 0.3 s.
With slices configured, each SLO stage's requests slower than its threshold_s by slice."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from detectors.latency.config import LatencyConfig
from detectors.latency.names import STAGE_LATENCY_SECONDS
from monitor.contract.buckets import LATENCY_BUCKETS
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import SLICE_LATENCY_REQUESTS_TOTAL, SLICE_LATENCY_SLOW_TOTAL
from monitor.contract.rulekit.simulation import Samples, SimulatedWorld

HEALTHY_P95_S = 1.2
INCIDENT_P95_S = 2.5
LATENCY_SIGMA = 0.5  # lognormal shape of the total latency: p50 0.53 s when p95 is 1.2 s
_Z95 = NormalDist().inv_cdf(0.95)


def series(config: LatencyConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    """Each stage's histogram, ``total`` and those ``guardrails.latency_slo`` watches."""
    for stage in sorted({"total", *guardrails.latency_slo}):
        if stage == "total":
            p95 = world.rate("latency", HEALTHY_P95_S, INCIDENT_P95_S)
        else:
            p95 = np.full(world.steps, HEALTHY_P95_S / 4)
        buckets = latency_buckets(p95, world.requests, world.rng)
        add_histogram(world.samples, {**world.labels, "stage": stage}, p95, world.requests, buckets)
        slo = guardrails.latency_slo.get(stage)
        if slo is not None:
            fast = buckets[:, LATENCY_BUCKETS.index(slo.threshold_s)]
            slow_share = 1 - fast / np.maximum(world.requests, 1)
            names = (SLICE_LATENCY_REQUESTS_TOTAL, SLICE_LATENCY_SLOW_TOTAL)
            world.add_slices(names, {"stage": stage}, world.requests, slow_share)


def latency_buckets(
    p95_s: NDArray[np.float64], requests: NDArray[np.int64], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Requests per latency bucket (cumulative over ``le``, ``+Inf`` last) each minute."""
    mu = np.log(p95_s) - _Z95 * LATENCY_SIGMA
    bounds = np.log(np.array(LATENCY_BUCKETS))
    below = np.vectorize(NormalDist().cdf)((bounds[None, :] - mu[:, None]) / LATENCY_SIGMA)
    shares = np.diff(
        np.concatenate([np.zeros((len(mu), 1)), below, np.ones((len(mu), 1))], axis=1), axis=1
    )
    counts = rng.multinomial(requests, shares)
    cumulative: NDArray[np.int64] = np.cumsum(counts, axis=1)
    return cumulative


def add_histogram(
    samples: Samples,
    labels: dict[str, str],
    p95_s: NDArray[np.float64],
    requests: NDArray[np.int64],
    buckets: NDArray[np.int64],
) -> None:
    """The stage's histogram: ``_bucket`` per ``le``, ``_count`` and ``_sum``."""
    for column, bound in enumerate((*LATENCY_BUCKETS, math.inf)):
        le = "+Inf" if math.isinf(bound) else repr(float(bound))  # prometheus_client's spelling
        samples.add(f"{STAGE_LATENCY_SECONDS}_bucket", {**labels, "le": le}, buckets[:, column])
    samples.add(f"{STAGE_LATENCY_SECONDS}_count", labels, requests)
    mean_s = np.exp(np.log(p95_s) - _Z95 * LATENCY_SIGMA + LATENCY_SIGMA**2 / 2)
    samples.add(f"{STAGE_LATENCY_SECONDS}_sum", labels, requests * mean_s)
