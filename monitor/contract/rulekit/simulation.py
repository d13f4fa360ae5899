"""The synthetic world of ``rag-monitor rules backtest --simulate``: the contract between the
simulator (``alerts/simulate.py``) and the components that write their series into it.

A world is a minute grid (``STEP_S``) of diurnal traffic: the expected requests a minute
follow a cosine from a night trough at 02:00 UTC (a twentieth of the peak) to a day peak
at 14:00, scaled so a day holds ``requests_per_day``, and the requests drawn are Poisson
around it. Incidents degrade a kind of behaviour for a span of minutes; each kind belongs
to the component that reacts to it (``DetectorComponent.incidents``). A component's
``simulate`` reads the world's requests, its incident windows and its own generator,
seeded from the world's seed and its name (so a world is the same on every run, and a
component's draws do not change with the others installed), and adds its counters, named
and labelled as its detector exports them (``job``, ``instance``,
``variant="production"``), so the generated rules read them as they read production.

A judge's simulation also sends what people say of its verdicts (``reviews``):
random-stratum reviews arrive at the world's ``reviews_per_week`` whatever the traffic
(people, not requests, set the pace). The judge passes ``JUDGE_FALSE_PASS`` of the
answers people fail and fails as many that people pass, as an honest judge would (at a
true share of 0.92 it disagrees with the reviewers on 9.6% of the items), and reads the
world's ``judge_bias`` high besides (default 0; a real judge is never exactly right, and
a bias of a few points, inside the bias tolerance, is what a healthy deployment sees).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.contract.durations import parse_duration
from monitor.contract.slicing import DOCUMENT_TYPE, INTENT, Slicer

STEP_S = 60  # the world's scrape interval: every counter is sampled once a minute
TROUGH_SHARE = 1 / 20  # the night trough's traffic over the day peak's
TROUGH_HOUR = 2.0  # UTC; the peak is twelve hours later
SIMULATED_INSTANCE = "simulated:9464"
# 2026-01-05 is a Monday: week-of-year seasonality lines up with the calendar.
DEFAULT_START_S = 1_767_571_200
REVIEWS_PER_WEEK = 50.0  # random-stratum reviews of judged answers people complete a week
JUDGE_BIAS = 0.0  # how much higher the judge's pass share reads than the reviewers'
JUDGE_FALSE_PASS = 0.6  # the share of the answers people fail that an honest judge passes
# Incident kinds that change the monitor, not the service (a new judge): ``all``, every
# degradation at once, leaves them out.
CHANGES = frozenset({"judge_change"})


@dataclass(frozen=True)
class Incident:
    """Kinds of degradation from ``start_s`` (seconds after the world's start) for
    ``duration_s``."""

    kinds: tuple[str, ...]
    start_s: float
    duration_s: float
    spec: str

    @classmethod
    def parse(cls, spec: str, known: Sequence[str]) -> Incident:
        """``kind[,kind...]:start:duration``, e.g. ``latency,regeneration:8d14h:2h``, of
        the ``known`` kinds; the kind ``all`` is every kind."""
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"incident {spec!r}: write kind:start:duration, like latency:8d14h:2h")
        everything = tuple(kind for kind in known if kind not in CHANGES)
        words = everything if parts[0] == "all" else tuple(parts[0].split(","))
        unknown = [word for word in words if word not in known]
        if unknown:
            choices = ", ".join((*known, "all"))
            raise ValueError(f"incident {spec!r}: unknown kind {unknown[0]!r} (one of {choices})")
        kinds = tuple(kind for kind in known if kind in words)
        return cls(kinds, parse_duration(parts[1]), parse_duration(parts[2]), spec)


@dataclass(frozen=True)
class World:
    """What to simulate: traffic, incidents, the seed, and the scrape target's labels."""

    requests_per_day: float
    duration_s: float
    incidents: Sequence[Incident] = ()
    seed: int = 0
    job: str = "rag-monitor"
    start_s: int = DEFAULT_START_S
    reviews_per_week: float = REVIEWS_PER_WEEK
    judge_bias: float = JUDGE_BIAS

    @property
    def steps(self) -> int:
        return int(self.duration_s // STEP_S)


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


@dataclass
class SimulatedWorld:
    """What a component's ``simulate`` reads and writes: the requests drawn each minute,
    the incidents, its generator (``of``), and the samples."""

    world: World
    requests: NDArray[np.int64]
    rng: np.random.Generator
    samples: Samples
    # The configured slices (``monitor.contract.slicing``): each request has one of the listed
    # intents and one of the listed document types, all equally likely.
    slicer: Slicer = field(default_factory=Slicer)

    @classmethod
    def start(cls, world: World, slicer: Slicer | None = None) -> SimulatedWorld:
        """The world's grid and its diurnal requests (the generator's first draw)."""
        rng = np.random.default_rng(world.seed)
        minutes = np.arange(world.steps, dtype=np.int64)
        requests = rng.poisson(diurnal_expected(world, minutes))
        samples = Samples(world.start_s + minutes * STEP_S)
        return cls(world, requests, rng, samples, slicer or Slicer())

    @property
    def steps(self) -> int:
        return len(self.requests)

    @property
    def target(self) -> dict[str, str]:
        """The scrape target's labels (``job``, ``instance``)."""
        return {"job": self.world.job, "instance": SIMULATED_INSTANCE}

    @property
    def labels(self) -> dict[str, str]:
        """The labels of a detector's production series: the target's and the variant."""
        return {**self.target, "variant": "production"}

    def of(self, owner: str) -> SimulatedWorld:
        """The same world with ``owner``'s own generator, seeded from the world's seed and
        its name: a component's draws do not depend on which other components are
        installed, or on their order."""
        rng = np.random.default_rng([self.world.seed, zlib.crc32(owner.encode())])
        return SimulatedWorld(self.world, self.requests, rng, self.samples, self.slicer)

    def during(self, kind: str) -> NDArray[np.bool_]:
        """The minutes in which an incident of ``kind`` is on."""
        on = np.zeros(self.steps, dtype=bool)
        for incident in self.world.incidents:
            if kind in incident.kinds:
                first = int(incident.start_s // STEP_S)
                last = math.ceil((incident.start_s + incident.duration_s) / STEP_S)
                on[first:last] = True
        return on

    def rate(self, kind: str, healthy: float, degraded: float) -> NDArray[np.float64]:
        """A true rate per minute: ``healthy``, but ``degraded`` during ``kind``'s incidents."""
        return np.where(self.during(kind), degraded, healthy).astype(float)

    def cells(self, counts: NDArray[np.int64]) -> dict[tuple[str, str], NDArray[np.int64]]:
        """``counts`` each minute spread over the (intent, document type) cells of the
        listed values, equally likely; one cell holds them all when slices are off."""
        if not self.slicer.enabled:
            return {}
        intents, types = sorted(self.slicer.intents), sorted(self.slicer.document_types)
        keys = [(intent, kind) for intent in intents for kind in types]
        drawn = self.rng.multinomial(counts, np.full(len(keys), 1 / len(keys)))
        return {key: drawn[:, index] for index, key in enumerate(keys)}

    def add_slices(
        self,
        names: tuple[str, str],
        labels: dict[str, str],
        events: NDArray[np.int64],
        share: NDArray[np.float64],
    ) -> None:
        """A guardrail's slice counters (``names``: events, hits), with the events spread
        over the cells and each cell's hits drawn at ``share`` (the global rate; the slice
        counters are drawn apart from the global ones). Nothing when slices are off."""
        cells = self.cells(events)
        hits = slice_totals({key: self.rng.binomial(count, share) for key, count in cells.items()})
        for (dimension, value), count in slice_totals(cells).items():
            cell = {**self.target, **labels, "dimension": dimension, "slice": value}
            self.samples.add(names[0], cell, count)
            self.samples.add(names[1], cell, hits[dimension, value])


def slice_totals(
    cells: dict[tuple[str, str], NDArray[np.int64]],
) -> dict[tuple[str, str], NDArray[np.int64]]:
    """Per-cell counts summed into slices: (intent, value) over its document types and
    (document_type, value) over its intents."""
    totals: dict[tuple[str, str], NDArray[np.int64]] = {}
    for (intent, kind), counts in cells.items():
        for key in ((INTENT, intent), (DOCUMENT_TYPE, kind)):
            totals[key] = totals[key] + counts if key in totals else counts.copy()
    return totals


def judge_share(world: SimulatedWorld, truth: NDArray[np.float64]) -> NDArray[np.float64]:
    """The pass share of the world's judge where ``truth`` is the true one: the world's
    ``judge_bias`` higher."""
    return np.clip(truth + world.world.judge_bias, 0.0, 1.0)


def reviews(
    world: SimulatedWorld, truth: NDArray[np.float64], judged: NDArray[np.float64]
) -> dict[tuple[bool, str], NDArray[np.int64]]:
    """Random-stratum reviews each minute of answers the judge scored, by (the judge
    passed, the reviewer's answer-supported value: yes or no), where ``truth`` is the
    minute's true pass share and ``judged`` the judge's: the judge passes
    ``JUDGE_FALSE_PASS`` of the failing answers and fails as many passing ones (all of
    them, where they are fewer), and its disagreements lean by the difference."""
    per_minute = world.world.reviews_per_week * STEP_S / (7 * 86_400)
    count = world.rng.poisson(per_minute, world.steps)
    honest = np.minimum(JUDGE_FALSE_PASS * (1 - truth), truth)
    lean = judged - truth
    false_pass = np.clip(honest + lean / 2, np.maximum(lean, 0), 1 - truth)
    false_fail = np.clip(false_pass - lean, 0, truth)
    shares = np.stack([truth - false_fail, false_pass, false_fail, 1 - truth - false_pass], axis=1)
    cells = world.rng.multinomial(count, shares / shares.sum(axis=1, keepdims=True))
    pairs = ((True, "yes"), (True, "no"), (False, "yes"), (False, "no"))
    return {pair: cells[:, index] for index, pair in enumerate(pairs)}
