"""The faithfulness detector's front end: sample inline, judge on the worker, export.

``observe`` runs on the pipeline thread and only asks the sampler. A trace it takes that
the judge need not see (no answer, a blank answer, a refusal, no context with text:
``triage.py``) is settled there and counted, never queued; the judge (HHEM or an LLM,
``judge_contract.py``) runs on the worker thread (``worker.py``) on the rest, and scores go to the
metrics and, when configured, to Phoenix as span annotations. Only scored answers enter
the score, the pass share and the ``JudgeScore`` events others act on; each event names
its judge, so that review calibrates each judge apart. Every other outcome goes out as an
``UnscoredAnswer`` event (``detectors.evaluations.emit`` sends it on with its outcome).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

import structlog
from prometheus_client import Counter, Gauge, Histogram

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.names import (
    BELOW_THRESHOLD_TOTAL,
    CACHE_HITS_TOTAL,
    EVALUATIONS_TOTAL,
    FAITHFULNESS_SCORE,
    MODEL_PAIRS_TOTAL,
    MODEL_SECONDS_TOTAL,
    TRUNCATED_TOTAL,
)
from detectors.faithfulness.triage import OUTCOMES, Triage, premise_of
from detectors.faithfulness.worker import (
    Evaluation,
    ScoringWorker,
    WorkerState,
    WorkerStats,
)
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.metrics import detector_up
from monitor.contract.missing import MissingInputs
from monitor.contract.names import (
    JUDGE_INFO,
    SLICE_FAITHFULNESS_BELOW_TOTAL,
    SLICE_FAITHFULNESS_SCORED_TOTAL,
)
from monitor.contract.sampler import Sampled, Sampler
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slice, SliceCounter, Slicer
from monitor.contract.trace import Event, JudgeScore, RagTrace, UnscoredAnswer
from monitor.contract.variants import PRODUCTION, ByVariant, variant_of
from monitor.contract.verdict_exports.phoenix import PhoenixAnnotator

if TYPE_CHECKING:
    from detectors.faithfulness.remote import PairPublisher

log = structlog.get_logger("rag_monitor.faithfulness")

SCORE_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))
QUEUE_SIZE = 128
# judge_location: kafka: the queue only waits for the publisher, a pair costs bytes, not
# seconds of a judge; bursts of a Kafka poll (500 records) must fit.
PUBLISH_QUEUE_SIZE = 4096


class FaithfulnessMetrics:
    """The faithfulness metrics (README, "Faithfulness"), plus the model's own counters.

    Every verdict series carries the ``judge`` label, the judge's identity
    (``judge_identity.judge_identity``), and ``rag_faithfulness_judge_info`` names the judge this
    process runs: the rules keep each judge apart and follow the current one."""

    def __init__(self, registry: SidecarRegistry, judge: str, slicer: Slicer | None = None) -> None:
        self._judge = judge
        slicer = slicer or Slicer()
        self.slice_scored = SliceCounter(
            slicer,
            SLICE_FAITHFULNESS_SCORED_TOTAL,
            "Scored production answers by slice and judge.",
            registry,
            ["judge"],
        )
        self.slice_below = SliceCounter(
            slicer,
            SLICE_FAITHFULNESS_BELOW_TOTAL,
            "Scored production answers below the threshold, by slice and judge.",
            registry,
            ["judge"],
        )
        score = Histogram(
            FAITHFULNESS_SCORE,
            "Faithfulness score of sampled answers by the judge (hhem: P(consistent), or "
            "the share of supported sentences; openai_compatible: the share of supported "
            "claims), by variant and judge (its identity).",
            ["variant", "judge"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.score = ByVariant(lambda variant: score.labels(variant, judge))
        evaluations = Counter(
            EVALUATIONS_TOTAL,
            "Sampled answers by outcome (scored; no_answer, no_claims (blank, or no claim "
            "found by an LLM judge), refusal, no_context (no context with text): settled "
            "without the judge; error: the judge gave no score), variant and judge.",
            ["outcome", "variant", "judge"],
            registry=registry,
        )
        self.evaluations = {
            o: ByVariant(functools.partial(_bind_outcome, evaluations, o, judge)) for o in OUTCOMES
        }
        below_threshold = Counter(
            BELOW_THRESHOLD_TOTAL,
            "Scored answers below detectors.faithfulness.threshold, by variant and judge.",
            ["variant", "judge"],
            registry=registry,
        )
        self.below_threshold = ByVariant(lambda variant: below_threshold.labels(variant, judge))
        Gauge(
            JUDGE_INFO,
            "1 for the faithfulness judge this process runs, by its identity (kind, model "
            "and revision, threshold; an LLM judge's prompts): a change of judge starts its "
            "own series and its own correction.",
            ["judge"],
            registry=registry,
        ).labels(judge).set(1)
        self.truncated = Counter(
            TRUNCATED_TOTAL,
            "Scored answers whose premise was cut to max_premise_tokens.",
            registry=registry,
        )
        self.cache_hits = Counter(
            CACHE_HITS_TOTAL,
            "Pairs whose score came from the LRU cache instead of the judge.",
            registry=registry,
        )
        self.model_pairs = Counter(
            MODEL_PAIRS_TOTAL,
            "Pairs scored by the judge (HHEM: each sentence at sentence granularity).",
            registry=registry,
        )
        self.model_seconds = Counter(
            MODEL_SECONDS_TOTAL,
            "Seconds spent in the judge: HHEM forward passes, or an LLM judge's batches "
            "(pairs / seconds: capacity).",
            registry=registry,
        )

    def count_slices(self, slices: tuple[Slice, ...], below: bool) -> None:
        """One scored production answer in its slices."""
        self.slice_scored.inc(slices, self._judge)
        # Counted at 0 too: a slice without a failing answer records a pass share of 1.
        self.slice_below.inc(slices, self._judge, amount=float(below))


def _bind_outcome(counter: Counter, outcome: str, judge: str, variant: str) -> Counter:
    return counter.labels(outcome, variant, judge)


def without_query_vector(trace: RagTrace) -> RagTrace:
    """The trace as the judge needs it: a query vector (1,536 numbers, about 50 KB) is not
    read by a judge, and thousands of unsampled traces are held for feedback."""
    return trace if trace.query_embedding is None else replace(trace, query_embedding=None)


class FaithfulnessDetector:
    """Sampled faithfulness of answers against their supplied contexts, by the configured
    judge (HHEM-2.1-Open or an LLM)."""

    name: ClassVar[str] = "faithfulness"

    def __init__(
        self,
        config: FaithfulnessConfig,
        registry: SidecarRegistry,
        *,
        worker: ScoringWorker | None = None,
        annotator: PhoenixAnnotator | None = None,
        queue_size: int | None = None,
        emit: Callable[[Event], bool] | None = None,
        kafka: KafkaConnection | None = None,
        slicer: Slicer | None = None,
    ) -> None:
        self.config = config
        self._slicer = slicer or Slicer()
        self.judge = judge_identity(config)
        self._emit = emit  # each verdict back into the pipeline: JudgeScore or UnscoredAnswer
        self.registry = registry
        self.enabled = config.enabled
        self.metrics = FaithfulnessMetrics(registry, self.judge, self._slicer)
        needs = ("answer", "contexts") if config.enabled else ()
        self.missing = MissingInputs(registry, self.name, needs)
        self._triage = Triage(config)
        self._up = detector_up(registry).labels(self.name)
        self.sampler = Sampler(
            self.name,
            registry,
            sample_rate=config.sample_rate,
            always_sample=config.always_sample,
            max_per_second=config.max_per_second,
            queue_size=queue_size
            if queue_size is not None
            else (PUBLISH_QUEUE_SIZE if config.judge_location == "kafka" else QUEUE_SIZE),
            min_per_hour=config.min_scored_per_hour,
            held_form=without_query_vector,
            settle=self._settle,
        )
        self.worker: ScoringWorker | PairPublisher
        if config.judge_location == "kafka" and worker is None:
            if kafka is None or not kafka.bootstrap_servers:
                raise ValueError(
                    "detectors.faithfulness.judge_location: kafka needs "
                    "collectors.kafka.bootstrap_servers"
                )
            from detectors.faithfulness.remote import PairPublisher  # kafka: not for --help

            # Scores come back from the scorers through the results topic, as JudgeScore.
            self.worker = PairPublisher(
                config, kafka, self.sampler.queue, registry, emit, slicer=self._slicer
            )
        else:
            self.worker = worker or ScoringWorker(
                config, self.sampler.queue, self._record, self._state, self._stats,
                registry=registry,
            )  # fmt: skip
        phoenix = config.phoenix
        if annotator is None and phoenix.enabled and phoenix.annotate:
            annotator = PhoenixAnnotator(
                phoenix.endpoint,
                registry,
                threshold=config.threshold,
                metadata={"judge": self.judge, "granularity": config.granularity}
                | ({"model": config.model} if config.judge == "hhem" else {}),
            )
        self.annotator = annotator

    def observe(self, trace: RagTrace) -> None:
        if self.enabled and self.worker.accepting:
            self.sampler.offer(trace)

    def observe_event(self, event: Event) -> None:
        if self.enabled and self.worker.accepting:
            self.sampler.observe_event(event)

    def start(self) -> None:
        if not self.enabled:
            return
        self._up.set(0)
        if self.annotator is not None:
            self.annotator.start()
        if self.config.judge_location == "kafka":
            self._up.set(1)  # no model here: up while it publishes
        self.worker.start()

    def shutdown(self) -> None:
        self.worker.shutdown()
        if self.annotator is not None:
            self.annotator.shutdown()

    def _state(self, state: WorkerState) -> None:
        self._up.set(1 if state == "ready" else 0)

    def _stats(self, stats: WorkerStats) -> None:
        self.metrics.model_pairs.inc(stats.pairs)
        self.metrics.model_seconds.inc(stats.seconds)
        self.metrics.cache_hits.inc(stats.cache_hits)

    def _settle(self, sampled: Sampled) -> bool:
        """Count a taken trace the model need not see; True when it was one."""
        trace = sampled.trace
        outcome = self._triage(trace)
        if outcome is None:
            return False
        if outcome == "no_answer":
            self.missing.count("answer")
        if outcome in ("no_answer", "no_context") and not premise_of(trace):
            self.missing.count("contexts")
        self._record(Evaluation(trace, outcome))
        return True

    def _record(self, evaluation: Evaluation) -> None:
        variant = variant_of(evaluation.trace)
        self.metrics.evaluations[evaluation.outcome][variant].inc()
        if evaluation.outcome != "scored" or evaluation.score is None:
            if self._emit is not None:  # an answer without a score is a verdict too
                outcome = "error" if evaluation.outcome == "scored" else evaluation.outcome
                trace_id = evaluation.trace.trace_id
                self._emit(UnscoredAnswer(trace_id, outcome, judge=self.judge))
            return
        score = evaluation.score
        self.metrics.score[variant].observe(score)
        below = score < self.config.threshold
        if below:
            self.metrics.below_threshold[variant].inc()
        if variant == PRODUCTION and self._slicer.enabled:
            self.metrics.count_slices(self._slicer.of(evaluation.trace), below)
        if evaluation.truncated:
            self.metrics.truncated.inc()
        if self._emit is not None:
            trace_id = evaluation.trace.trace_id
            self._emit(
                JudgeScore(
                    trace_id,
                    score,
                    self.config.threshold,
                    self.judge,
                    evaluation.spans,
                    evaluation.tiers,
                )
            )
        span_id = evaluation.trace.root_span_id
        if self.annotator is not None and span_id:
            self.annotator.annotate(span_id, score)
