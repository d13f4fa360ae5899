"""A synthetic world for ``rag-monitor rules backtest --simulate``: the counters the
sidecar would export, minute by minute, for a service with known true rates.

Traffic is diurnal: the expected requests a minute follow a cosine from a night
trough at 02:00 UTC (a twentieth of the peak) to a day peak at 14:00. Every true
rate is constant unless an incident changes it: faithful share 0.92 of the scored
answers, false exclusion 0.01 of one labelled query a minute, regeneration 0.05 of
the requests, total latency lognormal with p95 1.2 s, and 0.01 of the requests lack
each field the coverage ticket watches (questions nothing was retrieved for; a
``coverage`` incident leaves every request without contexts, as an instrumentation
the mapping cannot read does). Each configured evaluation (``detectors.evaluations``)
judges its ``sample_rate`` of the requests with a score normal around 0.9 (sd 0.1; an
``evaluation`` incident drops it to 0.6), 1% of them errors; a result passes a
``score_min`` rule at or above it, a ``score_max`` rule when ``1 - score`` is at or
below it, a ``labels`` rule as at 0.7. The faithfulness sampler
scores ``sample_rate`` of the requests, raised to ``min_scored_per_hour`` (when the
config has that floor) from the previous hour's traffic, and at most
``max_per_second``. Every draw comes from one seeded generator, so a world is the
same on every run. The series carry the names and labels the detectors export
(``job``, ``instance``, ``variant="production"``), so the generated rules read them
as they read production.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from alerts.scratch import write_openmetrics_series
from monitor.buckets import LATENCY_BUCKETS
from monitor.coverage import DEFAULT_INSTRUMENTATIONS
from monitor.durations import parse_duration
from monitor.names import FIELDS_TOTAL, REQUESTS_TOTAL

# The detectors' metric names (detectors/*/names.py): alerts imports no detector, so
# they are spelled again here, and tests/unit/test_backtest.py holds both spellings equal.
EVALUATIONS_TOTAL = "rag_faithfulness_evaluations_total"
BELOW_THRESHOLD_TOTAL = "rag_faithfulness_below_threshold_total"
FEEDBACK_EVENTS_TOTAL = "rag_feedback_events_total"
ELIGIBLE_QUERIES_TOTAL = "rag_filter_eligible_queries_total"
FALSE_EXCLUSIONS_TOTAL = "rag_filter_false_exclusions_total"
STAGE_LATENCY_SECONDS = "rag_stage_latency_seconds"
EVALUATION_RESULTS_TOTAL = "rag_evaluation_results_total"

IncidentKind = Literal[
    "faithfulness", "regeneration", "false_exclusion", "latency", "coverage", "evaluation"
]
INCIDENT_KINDS: tuple[IncidentKind, ...] = get_args(IncidentKind)
STEP_S = 60  # the world's scrape interval: every counter is sampled once a minute
TROUGH_SHARE = 1 / 20  # the night trough's traffic over the day peak's
TROUGH_HOUR = 2.0  # UTC; the peak is twelve hours later
HEALTHY_P95_S = 1.2
INCIDENT_P95_S = 2.5
LATENCY_SIGMA = 0.5  # lognormal shape of the total latency: p50 0.53 s when p95 is 1.2 s
_Z95 = NormalDist().inv_cdf(0.95)
SIMULATED_INSTANCE = "simulated:9464"
# 2026-01-05 is a Monday: week-of-year seasonality lines up with the calendar.
DEFAULT_START_S = 1_767_571_200


@dataclass(frozen=True)
class Rates:
    """The true rates of a healthy service."""

    faithful_share: float = 0.92
    false_exclusion: float = 0.01
    regeneration: float = 0.05
    total_p95_s: float = HEALTHY_P95_S
    contexts_missing: float = 0.01  # the share of requests without contexts
    field_missing: float = 0.01  # the same for each other watched field
    evaluation_score: float = 0.9  # the mean score of every simulated evaluation


HEALTHY = Rates()
# What each incident kind does to the rates (the acceptance incidents).
INCIDENT_RATES: dict[IncidentKind, dict[str, float]] = {
    "faithfulness": {"faithful_share": 0.75},
    "regeneration": {"regeneration": 2 * HEALTHY.regeneration},
    "false_exclusion": {"false_exclusion": 0.06},
    "latency": {"total_p95_s": INCIDENT_P95_S},
    "coverage": {"contexts_missing": 1.0},
    "evaluation": {"evaluation_score": 0.6},
}
EVALUATION_SCORE_SD = 0.1
EVALUATION_ERROR_SHARE = 0.01
LABEL_THRESHOLD = 0.7  # where a labels rule's verdict turns, on the simulated score
# The instrumentation scope of the simulated requests.
SIMULATED_INSTRUMENTATION = DEFAULT_INSTRUMENTATIONS[0]


@dataclass(frozen=True)
class Incident:
    """Kinds of degradation from ``start_s`` (seconds after the world's start) for
    ``duration_s``."""

    kinds: tuple[IncidentKind, ...]
    start_s: float
    duration_s: float
    spec: str

    @classmethod
    def parse(cls, spec: str) -> Incident:
        """``kind[,kind...]:start:duration``, e.g. ``latency,regeneration:8d14h:2h``;
        the kind ``all`` is every kind."""
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"incident {spec!r}: write kind:start:duration, like latency:8d14h:2h")
        words = INCIDENT_KINDS if parts[0] == "all" else tuple(parts[0].split(","))
        unknown = [word for word in words if word not in INCIDENT_KINDS]
        if unknown:
            choices = ", ".join((*INCIDENT_KINDS, "all"))
            raise ValueError(f"incident {spec!r}: unknown kind {unknown[0]!r} (one of {choices})")
        kinds = tuple(kind for kind in INCIDENT_KINDS if kind in words)
        return cls(kinds, parse_duration(parts[1]), parse_duration(parts[2]), spec)


@dataclass(frozen=True)
class SimulatedEvaluation:
    """One configured evaluation: its name, the share of requests it judges, and where a
    result passes (``score_min``; ``score_max`` of ``1 - score``)."""

    name: str
    sample_rate: float
    score_min: float = LABEL_THRESHOLD
    score_max: float | None = None

    def pass_share(self, mean: NDArray[np.float64]) -> NDArray[np.float64]:
        """The share of judged results that pass at each minute's mean score."""
        cdf = np.vectorize(NormalDist().cdf)
        if self.score_max is not None:
            share: NDArray[np.float64] = cdf((self.score_max - (1 - mean)) / EVALUATION_SCORE_SD)
        else:
            share = 1 - cdf((self.score_min - mean) / EVALUATION_SCORE_SD)
        return share


@dataclass(frozen=True)
class World:
    """What to simulate: traffic, the sampler as configured, incidents, the seed."""

    requests_per_day: float
    duration_s: float
    sample_rate: float
    max_scored_per_second: float
    min_scored_per_hour: float = 0.0
    stages: tuple[str, ...] = ("total",)
    fields: tuple[str, ...] = ()  # what the coverage ticket watches (monitor.coverage)
    evaluations: tuple[SimulatedEvaluation, ...] = ()  # detectors.evaluations
    incidents: Sequence[Incident] = ()
    seed: int = 0
    job: str = "rag-monitor"
    start_s: int = DEFAULT_START_S


@dataclass
class Samples:
    """Cumulative counter series on one time grid (seconds since the epoch)."""

    timestamps: NDArray[np.int64]
    series: list[tuple[str, dict[str, str], NDArray[np.float64]]] = field(default_factory=list)

    def add(self, name: str, labels: dict[str, str], per_step: NDArray[Any]) -> None:
        """Add a counter from its increments per step."""
        self.series.append((name, labels, np.cumsum(per_step)))

    def add_gauge(self, name: str, labels: dict[str, str], values: NDArray[np.float64]) -> None:
        self.series.append((name, labels, values))


def diurnal_expected(world: World, minutes: NDArray[np.int64]) -> NDArray[np.float64]:
    """Expected requests in each minute: a cosine between trough and peak, scaled so a
    day holds ``requests_per_day``."""
    hour = ((world.start_s + minutes * STEP_S) % 86_400) / 3600
    shape = (
        TROUGH_SHARE + (1 - TROUGH_SHARE) * (1 - np.cos(2 * np.pi * (hour - TROUGH_HOUR) / 24)) / 2
    )
    mean_shape = (1 + TROUGH_SHARE) / 2
    per_minute: NDArray[np.float64] = shape * world.requests_per_day / (1440 * mean_shape)
    return per_minute


def rate_series(world: World, steps: int) -> dict[str, NDArray[np.float64]]:
    """Each true rate per minute, healthy but where an incident changes it."""
    rates = {name: np.full(steps, getattr(HEALTHY, name), dtype=float) for name in vars(HEALTHY)}
    for incident in world.incidents:
        first = int(incident.start_s // STEP_S)
        last = math.ceil((incident.start_s + incident.duration_s) / STEP_S)
        for kind in incident.kinds:
            for name, value in INCIDENT_RATES[kind].items():
                rates[name][first:last] = value
    return rates


def scored_answers(
    world: World, requests: NDArray[np.int64], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Answers the faithfulness sampler scores each minute: its rate, raised to the
    hourly floor from the previous hour's traffic, capped by its capacity."""
    last_hour = np.convolve(requests, np.ones(60), mode="full")[: len(requests)]
    floor_share = world.min_scored_per_hour / np.maximum(last_hour, 1.0)
    share = np.clip(np.maximum(world.sample_rate, floor_share), 0.0, 1.0)
    drawn = rng.binomial(requests, share)
    capacity = int(world.max_scored_per_second * STEP_S)
    return np.minimum(drawn, capacity)


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


def simulate(world: World) -> Samples:
    """The world's counters, one sample a minute."""
    steps = int(world.duration_s // STEP_S)
    rng = np.random.default_rng(world.seed)
    minutes = np.arange(steps, dtype=np.int64)
    samples = Samples(world.start_s + minutes * STEP_S)
    rates = rate_series(world, steps)
    requests = rng.poisson(diurnal_expected(world, minutes))
    base = {"job": world.job, "instance": SIMULATED_INSTANCE}
    labels = {**base, "variant": "production"}
    samples.add_gauge("up", base, np.ones(steps))  # the sidecar is scraped throughout
    samples.add(REQUESTS_TOTAL, {**labels, "source": "otlp"}, requests)
    regenerations = rng.binomial(requests, rates["regeneration"])
    samples.add(FEEDBACK_EVENTS_TOTAL, {**labels, "kind": "regenerate"}, regenerations)
    scored = scored_answers(world, requests, rng)
    samples.add(EVALUATIONS_TOTAL, {**labels, "outcome": "scored"}, scored)
    unfaithful = rng.binomial(scored, 1 - rates["faithful_share"])
    samples.add(BELOW_THRESHOLD_TOTAL, labels, unfaithful)
    labelled = np.ones(steps, dtype=np.int64)  # one labelled query a minute
    samples.add(ELIGIBLE_QUERIES_TOTAL, labels, labelled)
    samples.add(FALSE_EXCLUSIONS_TOTAL, labels, rng.binomial(labelled, rates["false_exclusion"]))
    for stage in world.stages:
        p95 = rates["total_p95_s"] if stage == "total" else np.full(steps, HEALTHY_P95_S / 4)
        add_latency(samples, {**labels, "stage": stage}, p95, requests, rng)
    for name in world.fields:
        share = rates["contexts_missing" if name == "contexts" else "field_missing"]
        missing = rng.binomial(requests, share)
        field = {**base, "field": name, "instrumentation": SIMULATED_INSTRUMENTATION}
        samples.add(FIELDS_TOTAL, {**field, "present": "false"}, missing)
        samples.add(FIELDS_TOTAL, {**field, "present": "true"}, requests - missing)
    for evaluation in world.evaluations:
        passing = evaluation.pass_share(rates["evaluation_score"])
        judged = rng.binomial(requests, evaluation.sample_rate)
        add_evaluation(samples, {**labels, "evaluation": evaluation.name}, judged, passing, rng)
    return samples


def add_evaluation(
    samples: Samples,
    labels: dict[str, str],
    judged: NDArray[np.int64],
    pass_share: NDArray[np.float64],
    rng: np.random.Generator,
) -> None:
    """An evaluation's results by outcome from those it judged, 1% of them errors."""
    errors = rng.binomial(judged, EVALUATION_ERROR_SHARE)
    passed = rng.binomial(judged - errors, pass_share)
    outcomes = (("pass", passed), ("fail", judged - errors - passed), ("error", errors))
    for outcome, counts in outcomes:
        samples.add(EVALUATION_RESULTS_TOTAL, {**labels, "outcome": outcome}, counts)


def add_latency(
    samples: Samples,
    labels: dict[str, str],
    p95_s: NDArray[np.float64],
    requests: NDArray[np.int64],
    rng: np.random.Generator,
) -> None:
    """The stage's histogram: ``_bucket`` per ``le``, ``_count`` and ``_sum``."""
    buckets = latency_buckets(p95_s, requests, rng)
    for column, bound in enumerate((*LATENCY_BUCKETS, math.inf)):
        le = "+Inf" if math.isinf(bound) else repr(float(bound))  # prometheus_client's spelling
        samples.add(f"{STAGE_LATENCY_SECONDS}_bucket", {**labels, "le": le}, buckets[:, column])
    samples.add(f"{STAGE_LATENCY_SECONDS}_count", labels, requests)
    mean_s = np.exp(np.log(p95_s) - _Z95 * LATENCY_SIGMA + LATENCY_SIGMA**2 / 2)
    samples.add(f"{STAGE_LATENCY_SECONDS}_sum", labels, requests * mean_s)


def write_openmetrics(samples: Samples, path: Path) -> None:
    """The samples as an OpenMetrics file for ``promtool tsdb create-blocks-from openmetrics``."""
    times = [str(t) for t in samples.timestamps.tolist()]
    with path.open("w") as out:
        for name, labels, values in samples.series:
            formatted = [f"{value:.10g}" for value in values.tolist()]
            write_openmetrics_series(out, name, labels, times, formatted)
        out.write("# EOF\n")
