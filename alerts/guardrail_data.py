"""What ``rag-monitor report guardrails`` reads (``alerts.guardrail_report``) and renders
(``alerts.guardrail_sections``, ``alerts.guardrail_figures``): the report's parts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from alerts.guardrail_series import Guardrail, SliceRecording
from monitor.contract.rulekit.prediction_powered import Estimate

# Points a plotted series has over the period (Prometheus allows 11,000 a query).
POINTS = 1_000
MIN_STEP_S = 60.0
FIELD_MISSING_ALERT = "RagTraceFieldMissing"
NO_SLICE_DATA = "no slice data"
# The other reports, as the commands that write them next to this one.
OTHER_REPORTS = (
    ("drift", "rag-monitor report drift --since {since} --out {name}"),
    ("review", "rag-monitor report review --prometheus {url} --out {name}"),
    ("shadow", "rag-monitor report shadow --since {since} --out {name}"),
)

Points = list[tuple[float, float]]
Query = Callable[[str], list[tuple[dict[str, str], float]]]
RangeQuery = Callable[[str], list[tuple[dict[str, str], Points]]]


@dataclass(frozen=True)
class Marker:
    """A vertical line on every plot: a release, a judge change, an embedding model."""

    at: float
    kind: str
    text: str


@dataclass(frozen=True)
class Firing:
    """One run of an alert firing for one label set."""

    alert: str
    labels: str
    start: float
    end: float


@dataclass
class GuardrailPlot:
    guardrail: Guardrail
    series: list[tuple[str, Points]]  # (legend, points) of the value
    history: list[tuple[str, Points]]  # the judge's own share beside the corrected one
    band: list[tuple[str, Points, Points]]  # (legend, low, high)
    firings: list[Firing]


@dataclass
class SliceTable:
    recording: SliceRecording
    rows: list[tuple[str, str, str, float, float | None]]  # extra labels, dim, slice, share, bound


@dataclass
class ReviewLine:
    judge: str
    reviews: float
    bias: Estimate | None
    bias_bounds: tuple[float, float] | None
    corrected: Estimate | None
    effective: float | None


@dataclass
class GuardrailReport:
    since: float
    until: float
    period: str
    plots: list[GuardrailPlot]
    markers: list[Marker]
    firings: list[Firing]
    slices: list[SliceTable]
    coverage: dict[tuple[str, str], float]  # (intent, document_type) -> requests
    progress: list[tuple[str, float]]  # (what, count)
    reviews: list[ReviewLine]
    fields: list[tuple[str, float, float]]  # (field, missing, requests) over the period
    missing_inputs: list[tuple[str, str, float]]  # (detector, field, requests)
    notes: list[str] = field(default_factory=list)

    def firings_of(self, alerts: Sequence[str]) -> list[Firing]:
        return [f for f in self.firings if f.alert in alerts]
