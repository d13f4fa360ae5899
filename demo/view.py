"""The demo's live view: the five guardrails, the incident running now and the alert it
should fire, the release, and where to look next.

Every value comes from the generated rules evaluated on the sidecar's registry
(``demo.rule_evaluation``) over the view's window, a tenth of the incident cycle so
that every incident outlasts it. One ``Snapshot`` per refresh is drawn as a screen
fitted to the terminal or a plain text block (a pipe), both by ``demo.board``, or as
one JSON object (``--json``).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from demo.rule_conditions import Condition
from demo.rule_evaluation import BREACH, NOT_HERE, Looks, Reading, RuleEvaluator
from demo.service import SERVICE, TIMELINE, Incident, SyntheticRagService, release_start
from monitor.contract.names import REQUESTS_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.variants import PRODUCTION

WINDOW_SHARE = 0.1  # of the cycle; the shortest incident lasts 0.15 of it
TREND_POINTS = 20  # the trend column: the guardrail's value at the last refreshes


@dataclass(frozen=True)
class Guardrail:
    name: str
    alert: str  # its alert in the generated rules (the page one where there are two)
    estimate: str  # what the row's value is


# The five guardrails of docs/pages/concepts/guardrails.md, in its order.
GUARDRAILS = (
    Guardrail("faithfulness", "RagFaithfulnessLow", "pass share"),
    Guardrail("latency SLO", "RagStageLatencySLOBreach", "slow share"),
    Guardrail("false exclusion", "RagFilterFalseExclusionHigh", "excluded share"),
    Guardrail("regeneration", "RagRegenerationRateAnomalous", "regenerated share"),
    Guardrail("cost per query", "RagCostPerQueryHigh", "mean USD"),
)


@dataclass(frozen=True)
class GuardrailRow:
    guardrail: str  # with the stage, for a per-stage guardrail: "latency SLO total"
    estimate: str
    alert: str  # the alert condition read, as "Name{label=...}"
    state: str  # ok, BREACH, too little evidence, no evidence yet, evaluated by Prometheus only
    value: float | None
    bound: float | None  # the evidence bound the alert tests, where it tests one
    evidence: float | None  # observations in the window behind the value
    op: str | None  # the alert's test of the bound (or of the value): op threshold
    threshold: float | None
    trend: list[float | None]  # the value at the last refreshes, oldest first


@dataclass(frozen=True)
class IncidentRun:
    name: str
    alert: str  # the alert it should fire
    start_s: float  # seconds since the demo started
    end_s: float
    met_at_s: float | None  # when the view first saw the alert's condition hold in it


@dataclass(frozen=True)
class Links:
    metrics: str
    review: str | None
    commands: list[str]
    docs: str
    log: str


@dataclass(frozen=True)
class Snapshot:
    elapsed_s: float
    cycle_s: float
    window_s: float  # what the values cover: the window, or the time since the last
    # refresh where that is longer (every 10 s without a terminal), or since the start
    requests_per_s: float  # production requests a second over the window
    shadow_per_s: float  # their shadow twins
    requests: float  # production requests in all
    service: str
    release: str  # the service.version serving now
    release_since_s: float
    incident: IncidentRun | None  # running now
    last_incident: IncidentRun | None
    next_incident: IncidentRun | None
    guardrails: list[GuardrailRow]
    other_alerts: dict[str, str]  # every other condition the demo evaluates: title -> state
    prometheus_only: list[str]  # the alerts whose conditions the demo cannot evaluate
    missing_models: list[str]  # "detector needs model"
    recorded: dict[str, float]  # the recording rules' series over the window
    links: Links


Run = tuple[int, Incident]  # an incident in one cycle (0: the first)


class LiveView:
    """Makes snapshots from the rules' evaluation and the service's timeline, remembering
    each guardrail's recent values and when each incident's alert condition held.

    A request reaches the registry ``lag_s`` after it was sent (span assembly's grace),
    and stays in the window ``window_s`` more: an incident's alert condition counts as
    met by it while it runs and that long after it ends."""

    def __init__(
        self,
        registry: SidecarRegistry,
        rules: dict[str, Any],
        service: SyntheticRagService,
        links: Links,
        *,
        missing_models: list[str],
        lag_s: float,
    ) -> None:
        self._registry = registry
        self._service = service
        self._window_s = service.cycle_s * WINDOW_SHARE
        self._settle_s = self._window_s + lag_s
        self._rules = RuleEvaluator(rules, registry, window_s=self._window_s, clock=service.elapsed)
        self._links = links
        self._missing_models = missing_models
        self._trends: dict[str, deque[float | None]] = {}
        self._met: dict[Run, float] = {}  # when the view first saw the alert's condition
        self._requests: Looks[str] = Looks(self._window_s)  # by variant

    def snapshot(self) -> Snapshot:
        elapsed = self._service.elapsed()
        recorded, readings = self._rules.evaluate()
        by_condition = [(c, readings[c.title]) for c in self._rules.conditions]
        cycle_s = self._service.cycle_s
        now, last, upcoming = incidents_around(elapsed, cycle_s)
        met = {c.alert for c, r in by_condition if r.state == BREACH}
        for run in (run for run in (now, last) if run is not None):
            cycle, incident = run
            settled = (cycle + incident.end) * cycle_s + self._settle_s
            if incident.alert in met and elapsed <= settled:
                self._met.setdefault(run, elapsed)
        release = self._service.current_version()
        rows = self._rows(by_condition)
        guardrail_alerts = {guardrail.alert for guardrail in GUARDRAILS}
        requests, per_s, covered = self._requests_per_s(elapsed)
        return Snapshot(
            elapsed_s=round(elapsed, 1),
            cycle_s=cycle_s,
            window_s=round(covered, 1),
            requests_per_s=per_s.get(PRODUCTION, 0.0),
            shadow_per_s=sum(v for k, v in per_s.items() if k != PRODUCTION),
            requests=requests.get(PRODUCTION, 0.0),
            service=SERVICE,
            release=release,
            release_since_s=round(release_start(release, cycle_s), 1),
            incident=self._run(now, cycle_s),
            last_incident=self._run(last, cycle_s),
            next_incident=self._run(upcoming, cycle_s),
            guardrails=rows,
            other_alerts={
                c.title: r.state
                for c, r in by_condition
                if c.alert not in guardrail_alerts and r.state != NOT_HERE
            },
            prometheus_only=_unique(c.alert for c, r in by_condition if r.state == NOT_HERE),
            missing_models=self._missing_models,
            recorded={series: round(value, 6) for series, value in recorded.items()},
            links=self._links,
        )

    def _rows(self, by_condition: list[tuple[Condition, Reading]]) -> list[GuardrailRow]:
        """One row per guardrail and stage: its alert's first condition of each label set
        but the window (the shortest window comes first in the rules)."""
        rows = []
        for guardrail in GUARDRAILS:
            seen: set[tuple[tuple[str, str], ...]] = set()
            for condition, reading in by_condition:
                labels = tuple((k, v) for k, v in condition.labels if k != "window")
                if condition.alert != guardrail.alert or labels in seen:
                    continue
                seen.add(labels)
                trend = self._trends.setdefault(condition.title, deque(maxlen=TREND_POINTS))
                trend.append(reading.value)
                name = " ".join([guardrail.name, *(v for _, v in labels)])
                rows.append(
                    GuardrailRow(
                        guardrail=name,
                        estimate=guardrail.estimate,
                        alert=condition.title,
                        state=reading.state,
                        value=reading.value,
                        bound=reading.bound,
                        evidence=reading.evidence,
                        op=reading.op,
                        threshold=reading.threshold,
                        trend=list(trend),
                    )
                )
        return rows

    def _requests_per_s(self, elapsed: float) -> tuple[dict[str, float], dict[str, float], float]:
        """Requests by variant in all and a second over the window, and the seconds the
        window covers (the rules' looks are at the same times)."""
        totals: dict[str, float] = {}
        for metric in self._registry.collect():
            for sample in metric.samples:
                if sample.name == REQUESTS_TOTAL:
                    variant = sample.labels.get("variant", PRODUCTION)
                    totals[variant] = totals.get(variant, 0.0) + sample.value
        then, before = self._requests.baseline(elapsed) or (0.0, {})
        self._requests.add(elapsed, totals)
        seconds = max(elapsed - then, 1e-9)
        per_s = {k: round((v - before.get(k, 0.0)) / seconds, 1) for k, v in totals.items()}
        return totals, per_s, seconds

    def _run(self, run: tuple[int, Incident] | None, cycle_s: float) -> IncidentRun | None:
        if run is None:
            return None
        cycle, incident = run
        return IncidentRun(
            incident.name,
            incident.alert,
            round((cycle + incident.start) * cycle_s, 1),
            round((cycle + incident.end) * cycle_s, 1),
            None if run not in self._met else round(self._met[run], 1),
        )


def incidents_around(elapsed: float, cycle_s: float) -> tuple[Run | None, Run | None, Run | None]:
    """The incident running at ``elapsed`` seconds, the last one that ended, the next one."""
    cycle = int(elapsed // cycle_s)
    runs = [(c, i) for c in (cycle - 1, cycle, cycle + 1) if c >= 0 for i in TIMELINE]

    def start(run: Run) -> float:
        return (run[0] + run[1].start) * cycle_s

    def end(run: Run) -> float:
        return (run[0] + run[1].end) * cycle_s

    now = next((run for run in runs if start(run) <= elapsed < end(run)), None)
    last = max((run for run in runs if end(run) <= elapsed), key=end, default=None)
    upcoming = min((run for run in runs if start(run) > elapsed), key=start, default=None)
    return now, last, upcoming


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def as_json(snapshot: Snapshot) -> str:
    """One line: the snapshot as a JSON object (``rag-monitor demo --json``)."""
    return json.dumps(asdict(snapshot), separators=(",", ":"))
