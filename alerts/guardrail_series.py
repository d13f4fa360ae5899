"""The guardrails at a glance: what the dashboard's first row and ``rag-monitor report
guardrails`` read for each guardrail, from one place so that both show one number.

Each guardrail is read from the recordings its alert reads (``rag-monitor rules``): the
current value, the bound its alert tests (where the alert tests one) and the count of
events it rests on, against the threshold of the ``guardrails:`` section. The names are
looked up in the rule document the registered components generate: a guardrail whose
component is not installed, or whose recording is not generated, is left out rather than
drawn empty. The slices' recordings (``rag:slice_*``) are read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alerts.rules import build_rules
from monitor.contract.components import DetectorComponent, load_components
from monitor.contract.config import Config, detector_section
from monitor.contract.durations import parse_duration
from monitor.contract.names import P_VALUE, REQUEST_COST_USD

BAND_Z = 1.645  # the corrected share's two-sided 90% band, as on the dashboard


@dataclass(frozen=True)
class Guardrail:
    """One guardrail as both views read it. Expressions are PromQL with ``<sel>`` where
    the job matcher goes (the dashboard's ``$job``, the report's configured job)."""

    key: str
    title: str
    value: str  # the current value (one series per judge, stage or signal)
    threshold: float
    worse_above: bool  # True: a value above the threshold breaches it
    unit: str  # Grafana's unit: percentunit, currencyUSD, none
    legend: str  # Grafana legend template of ``value``
    alerts: tuple[str, ...]  # the alerts that fire on it
    bound: str = ""  # the bound its alert tests, nothing where it tests the value
    evidence: str = ""  # the events the value rests on, nothing where none is counted
    evidence_name: str = ""
    band: tuple[str, str] | None = None  # a (low, high) interval the report shades
    page: float | None = None  # a second, page-level threshold (the SLO's fast burn)
    history: str = ""  # what the report plots when not ``value`` (the judge's own share)
    history_name: str = ""
    note: str = ""

    def expr(self, which: str, sel: str) -> str:
        """``value``, ``bound``, ``evidence`` or ``history`` with the job matcher in."""
        text: str = getattr(self, which)
        return text.replace("<sel>", sel)


@dataclass(frozen=True)
class SliceRecording:
    """A guardrail by slice (``dimension``: intent or document_type; ``slice``: its value):
    the recorded share and the bound its evidence allows, worst first."""

    guardrail: str
    share: str
    bound: str  # empty: no bound recorded (cost)
    labels: tuple[str, ...]  # beside job, dimension and slice
    worse_above: bool
    threshold: float
    unit: str


def recorded_names(document: dict[str, Any]) -> set[str]:
    """The ``record:`` names of a rule document."""
    return {
        rule["record"]
        for group in document["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def runbooks(document: dict[str, Any]) -> dict[str, str]:
    """Alert name -> its runbook link (the ``runbook`` annotation every alert carries)."""
    return {
        rule["alert"]: rule.get("annotations", {}).get("runbook", "")
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def longest(windows: Sequence[str]) -> str:
    return max(windows, key=parse_duration)


def guardrails(
    config: Config,
    document: dict[str, Any] | None = None,
    components: Sequence[DetectorComponent[Any]] | None = None,
) -> list[Guardrail]:
    """The guardrails whose recordings ``document`` (default: ``build_rules(config)``)
    generates, in the dashboard's order: faithfulness, false exclusion, latency per SLO
    stage, cost, drift."""
    chosen = load_components() if components is None else components
    rules = build_rules(config, chosen) if document is None else document
    recorded = recorded_names(rules)
    found = _faithfulness(config, recorded) + _false_exclusion(config, recorded)
    found += _latency(config, recorded) + _cost(config, recorded)
    return found + _drift(config, chosen, set(runbooks(rules)))


def _faithfulness(config: Config, recorded: set[str]) -> list[Guardrail]:
    window = longest(config.guardrails.sample_windows)
    judge = f"rag:faithfulness_pass:ratio_rate{window}"
    if judge not in recorded:
        return []
    corrected = f"rag:faithfulness_pass:corrected_ratio{window}"
    stderr = f"rag:faithfulness_pass:corrected_stderr{window}"
    has_corrected = corrected in recorded and stderr in recorded
    # the corrected share where its reviews exist, else the judge's own
    value = f"{corrected}{{<sel>}} or {judge}{{<sel>}}" if has_corrected else f"{judge}{{<sel>}}"
    debiased = f"rag:faithfulness_pass:debiased_upper_bound{window}"
    own_bound = f"rag:faithfulness_pass:upper_bound{window}"
    bound = f"{own_bound}{{<sel>}}"
    if debiased in recorded:  # the page tests the corrected bound once reviews suffice
        bound = f"{debiased}{{<sel>}} or {bound}"
    return [
        Guardrail(
            "faithfulness",
            "Faithfulness pass share",
            value,
            config.guardrails.faithfulness_min,
            False,
            "percentunit",
            "{{judge}}",
            ("RagFaithfulnessLow",),
            bound=bound if own_bound in recorded else "",
            evidence=f"rag:faithfulness_scored:increase{window}{{<sel>}}",
            evidence_name=f"answers judged in {window}",
            band=(
                (
                    f"{corrected}{{<sel>}} - {BAND_Z} * {stderr}{{<sel>}}",
                    f"{corrected}{{<sel>}} + {BAND_Z} * {stderr}{{<sel>}}",
                )
                if has_corrected
                else None
            ),
            history=f"{judge}{{<sel>}}",
            history_name="the judge's own",
            note=f"over {window}; corrected by the random reviews where they exist",
        )
    ]


def _false_exclusion(config: Config, recorded: set[str]) -> list[Guardrail]:
    window = longest(config.guardrails.sample_windows)
    false_exclusion = f"rag:filter_false_exclusions:ratio_rate{window}"
    if false_exclusion not in recorded:
        return []
    lower = f"rag:filter_false_exclusions:lower_bound{window}"
    return [
        Guardrail(
            "false_exclusion",
            "False-exclusion rate",
            f"{false_exclusion}{{<sel>}}",
            config.guardrails.false_exclusion_max,
            True,
            "percentunit",
            "{{job}}",
            ("RagFilterFalseExclusionHigh",),
            bound=f"{lower}{{<sel>}}",
            evidence=f"rag:filter_eligible_queries:increase{window}{{<sel>}}",
            evidence_name=f"labelled queries in {window}",
            band=(f"{lower}{{<sel>}}", f"{false_exclusion}{{<sel>}}"),
            note=f"over {window}; the band reaches down to the lower bound the alert tests",
        )
    ]


def _latency(config: Config, recorded: set[str]) -> list[Guardrail]:
    """One guardrail per SLO stage."""
    limits = config.guardrails
    long = limits.slo_windows.ticket[0]
    found: list[Guardrail] = []
    for stage, slo in limits.latency_slo.items():
        slow = f"rag:stage_latency_seconds:slow_ratio_rate{long}"
        if slow not in recorded:
            continue
        matcher = f'<sel>, stage="{stage}"'
        lower = f"rag:stage_latency_seconds:slow_ratio_lower_bound{long}"
        budget = round(1 - slo.objective, 12)  # 1 - 0.95 is 0.050000000000000044
        found.append(
            Guardrail(
                f"latency_{stage}",
                f"Latency SLO: {stage} slower than {slo.threshold_s:g}s",
                f"{slow}{{{matcher}}}",
                budget,
                True,
                "percentunit",
                "{{stage}}",
                ("RagStageLatencySLOBreach", "RagStageLatencySLOBudgetBurn"),
                bound=f"{lower}{{{matcher}}}" if lower in recorded else "",
                evidence=f"rag:stage_latency_seconds:count_increase{long}{{{matcher}}}",
                evidence_name=f"requests in {long}",
                band=(f"{lower}{{{matcher}}}", f"{slow}{{{matcher}}}")
                if lower in recorded
                else None,
                page=budget * slo.page_burn_rate,
                note=f"the SLO's error ratio over {long}: its budget is {budget:.1%}, the page "
                f"burns {slo.page_burn_rate:g} times it",
            )
        )
    return found


def _cost(config: Config, recorded: set[str]) -> list[Guardrail]:
    limits = config.guardrails
    cost = f"rag:request_cost_usd:mean{limits.window}"
    if cost not in recorded:
        return []
    # the cost histogram's count: the cost alert's evidence (requests priced)
    return [
        Guardrail(
            "cost",
            "Cost per query",
            f"{cost}{{<sel>}}",
            limits.cost_per_query_max_usd,
            True,
            "currencyUSD",
            "{{job}}",
            ("RagCostPerQueryHigh",),
            evidence=f"sum by (job) (increase({REQUEST_COST_USD}_count{{<sel>, "
            f'variant="production"}}[{limits.window}]))',
            evidence_name=f"priced requests in {limits.window}",
            note=f"mean over {limits.window}",
        )
    ]


def _drift(
    config: Config, chosen: Sequence[DetectorComponent[Any]], alerts: set[str]
) -> list[Guardrail]:
    """The drift alert reads the detector's p-value gauge raw: no recording rule summarises
    a test."""
    drift = [c for c in chosen if c.name == "drift"]
    if not drift or "RagQueryDriftDetected" not in alerts:
        return []
    significance = float(detector_section(config, drift[0]).p_value)
    return [
        Guardrail(
            "drift",
            "Query drift: MMD test p-value",
            f"min by (signal) ({P_VALUE}{{<sel>}})",
            significance,
            False,
            "none",
            "{{signal}}",
            ("RagQueryDriftDetected", "RagEmbeddingModelChanged"),
            note=f"a p-value under the significance level {significance:g} flags the "
            "window; each test compares the latest window of query vectors with the "
            "reference",
        )
    ]


def slice_recordings(
    config: Config, document: dict[str, Any] | None = None
) -> list[SliceRecording]:
    """The slice recordings ``document`` generates, over the longest sample window."""
    rules = build_rules(config) if document is None else document
    recorded = recorded_names(rules)
    limits = config.guardrails
    window = longest(limits.sample_windows)
    candidates = [
        SliceRecording(
            "faithfulness",
            f"rag:slice_faithfulness_pass:ratio_rate{window}",
            f"rag:slice_faithfulness_pass:upper_bound{window}",
            ("judge",),
            False,
            limits.faithfulness_min,
            "percentunit",
        ),
        SliceRecording(
            "false exclusion",
            f"rag:slice_false_exclusion:ratio_rate{window}",
            f"rag:slice_false_exclusion:lower_bound{window}",
            (),
            True,
            limits.false_exclusion_max,
            "percentunit",
        ),
        SliceRecording(
            "latency slow share",
            f"rag:slice_latency_slow:ratio_rate{window}",
            f"rag:slice_latency_slow:lower_bound{window}",
            ("stage",),
            True,
            min((1 - slo.objective for slo in limits.latency_slo.values()), default=0.05),
            "percentunit",
        ),
        SliceRecording(
            "cost per query",
            f"rag:slice_cost_per_query:ratio_rate{window}",
            "",
            (),
            True,
            limits.cost_per_query_max_usd,
            "currencyUSD",
        ),
    ]
    return [s for s in candidates if s.share in recorded and (not s.bound or s.bound in recorded)]
