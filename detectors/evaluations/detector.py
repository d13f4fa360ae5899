"""Evaluators' verdicts counted per evaluation, outcome and variant
(``rag_evaluation_results_total``), their finite scores in ``rag_evaluation_score``.

A result inside a trace (a span event, an annotation, an EVALUATOR span, a log record
that joined the trace in span assembly) counts under that trace's variant. A result
sent on its own (a log record of a trace already emitted or never seen, a late span)
names its request by trace id or ``gen_ai.response.id``: it counts under the variant of
the recent trace it names, and under production, counted as unmatched, when this
replica has not seen that trace lately (another replica may have, or it aged out of the
bounded map).

A result seen again (``repeats.py``: the same trace, span, evaluation, response id and
verdict, within the last ``max_tracked_results``) counts once; the repeat only in
``rag_evaluation_duplicates_total``.

Every label value is bounded: an evaluation is a configured name, ``other`` (counted in
``rag_evaluation_folded_total``) or ``none`` when the producer sent no name; the outcome
is pass, fail, or error (the producer's ``error.type``, no name, or no finite score or
label where the pass rule needs one).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, ClassVar, Literal

from prometheus_client import Counter, Histogram

from detectors.evaluations.config import EvaluationRule, EvaluationsConfig
from detectors.evaluations.names import (
    DUPLICATES_TOTAL,
    FOLDED_TOTAL,
    RESULTS_TOTAL,
    SCORE,
    UNMATCHED_TOTAL,
)
from detectors.evaluations.repeats import CountedResults
from monitor.contract.detector import InlineDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import (
    EvaluationResult,
    Event,
    ExclusionOutcome,
    JudgeScore,
    RagTrace,
    UnscoredAnswer,
)
from monitor.contract.variants import NONE, OTHER, PRODUCTION, bounded_label, variant_of

if TYPE_CHECKING:  # the OpenTelemetry SDK loads only when emit is configured
    from monitor.contract.verdict_exports.otlp_logs import EvaluationEmitter

Outcome = Literal["pass", "fail", "error"]
# Scores on a 0..1 scale (Ragas, DeepEval, Phoenix) and on 1..10 ones (LLM-judge rubrics).
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2, 3, 4, 5, 7, 10)


def outcome(result: EvaluationResult, rule: EvaluationRule | None) -> Outcome:
    """Whether ``result`` passes ``rule``; error when it cannot be judged by it."""
    passes = None if not result.name or rule is None else rule.passes(result)
    if passes is None:
        return "error"
    return "pass" if passes else "fail"


class EvaluationsDetector(InlineDetector):
    """Counts evaluation results by name, outcome and variant."""

    name: ClassVar[str] = "evaluations"

    def __init__(
        self,
        config: EvaluationsConfig,
        registry: SidecarRegistry,
        emitter: EvaluationEmitter | None = None,
    ) -> None:
        self._config = config
        self._emitter = emitter
        self._allowed = frozenset(config.evaluations)
        self._results = Counter(
            RESULTS_TOTAL,
            "Evaluation results by evaluation (a configured name, other or none), outcome "
            "(pass, fail, error) and variant.",
            ["evaluation", "outcome", "variant"],
            registry=registry,
        )
        for name in (*config.evaluations, OTHER, NONE):
            for result in ("pass", "fail", "error"):
                self._results.labels(name, result, PRODUCTION)
        self._scores = Histogram(
            SCORE,
            "Finite scores of evaluation results, by evaluation.",
            ["evaluation"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self._unmatched = Counter(
            UNMATCHED_TOTAL,
            "Results sent apart from their request whose trace this replica never saw (after "
            "waiting collectors.spans.assembly.ttl_s for its spans) or has forgotten; "
            "counted under production.",
            registry=registry,
        )
        self._folded = Counter(
            FOLDED_TOTAL,
            "Results whose evaluation name is not configured, counted as evaluation=other.",
            registry=registry,
        )
        self._duplicates = Counter(
            DUPLICATES_TOTAL,
            "Results seen again (the same trace, span, evaluation, response id and verdict: "
            "a span event and a log record of one verdict, a retried export, a redelivery), "
            "counted once among the results.",
            registry=registry,
        )
        self._counted = CountedResults(config.max_tracked_results)
        # Recent requests' variants by trace id and by response id, oldest first; and, when
        # emitting, their root span ids (None: unknown), under which verdicts are parented.
        self._variants: OrderedDict[str, str] = OrderedDict()
        self._roots: OrderedDict[str, str | None] = OrderedDict()

    def observe(self, trace: RagTrace) -> None:
        variant = variant_of(trace)
        self._remember(trace.trace_id, variant)
        if self._emitter is not None:
            self._roots[trace.trace_id] = trace.root_span_id
            if len(self._roots) > self._config.max_tracked_traces:
                self._roots.popitem(last=False)
        for result in trace.evaluations:
            if result.response_id:
                self._remember(result.response_id, variant)
            self._count(result, variant, trace.trace_id)

    def observe_event(self, event: Event) -> None:
        # A verdict goes out from the replica that saw its request: with judge_location:
        # kafka every replica reads every score, and one record per verdict is wanted.
        if (
            self._emitter is not None
            and isinstance(event, JudgeScore | UnscoredAnswer | ExclusionOutcome)
            and event.trace_id in self._roots
        ):
            self._emitter.emit(event, self._roots[event.trace_id])
        if not isinstance(event, EvaluationResult):
            return
        variant = None
        for key in (event.trace_id, event.response_id):
            if key and variant is None:
                variant = self._variants.get(key)
        if self._count(event, variant or PRODUCTION) and variant is None:
            self._unmatched.inc()

    def shutdown(self) -> None:
        if self._emitter is not None:
            self._emitter.shutdown()

    def _remember(self, key: str, variant: str) -> None:
        self._variants[key] = variant
        self._variants.move_to_end(key)
        if len(self._variants) > self._config.max_tracked_traces:
            self._variants.popitem(last=False)

    def _count(self, result: EvaluationResult, variant: str, trace_id: str | None = None) -> bool:
        """Count ``result`` under ``variant`` unless it was counted before (then it is a
        duplicate); ``trace_id``: the trace it arrived in. True when counted."""
        if not self._counted.first_time(result, trace_id):
            self._duplicates.inc()
            return False
        name = bounded_label(result.name, self._allowed)
        if name == OTHER:
            self._folded.inc()
        judged = outcome(result, self._config.rule(name))
        self._results.labels(name, judged, variant).inc()
        score = result.score
        if name not in (OTHER, NONE) and score is not None and math.isfinite(score):
            self._scores.labels(name).observe(score)
        return True
