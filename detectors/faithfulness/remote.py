"""Judging off the sidecar (``judge_location: kafka``): the sidecar's half.

The sidecar samples as it does inline (the same trace-id hash, the always-sample kinds,
the floor, the rate cap) and settles what the judge need not see (no answer, no context,
...) before anything leaves it. Each remaining pair (premise, answer, question, trace id,
span id, variant, service, stratum) goes to ``remote.requests_topic`` keyed by trace id,
from a worker thread so that the pipeline never waits on the broker. The scorers
(``rag-monitor score``, ``scorer.py``) judge the pairs and publish one record each to
``remote.results_topic``: a ``JudgeScore``, or an ``UnscoredAnswer`` when the judge gave
no score (``error``, ``no_claims``). Every sidecar reads the topic whole and feeds each
into its pipeline as it does an inline verdict: review and shadow act on the scores
unchanged, and ``detectors.evaluations.emit`` sends both on.

The stratum says why the pair was taken, in the order the scorers keep pairs when they
must shed: ``thumbs_down`` and ``probe`` (always), ``floor`` (taken only because
``min_scored_per_hour`` raised this sidecar's rate: a candidate the scorers keep at the
service floor's rate, what other judged pairs leave of it), ``random`` (under
``sample_rate``).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, Literal, get_args

import orjson
from prometheus_client import Counter

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_contract import JudgeOutcome
from detectors.faithfulness.names import PUBLISHED_TOTAL, RESULTS_READ_TOTAL
from detectors.faithfulness.triage import premise_of
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.replication import TopicPublisher, WholeTopicReader, client_settings
from monitor.contract.sampler import Sampled, trace_fraction
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slicer, slices_record
from monitor.contract.trace import (
    Event,
    JudgeScore,
    UnscoredAnswer,
    bounded_judge,
    spans_from_record,
    tiers_from_record,
    verdict_parts_record,
)
from monitor.contract.variants import PRODUCTION, variant_of
from monitor.contract.worker import Worker

Stratum = Literal["thumbs_down", "probe", "floor", "random"]
STRATA: tuple[Stratum, ...] = ("thumbs_down", "probe", "floor", "random")
ALWAYS: frozenset[str] = frozenset({"thumbs_down", "probe"})
UNKNOWN_SERVICE = "unknown"
# What a scorer's judge ends with besides a score (the sidecar settles the other outcomes
# before it publishes a pair): the only outcomes a results record may carry.
UNSCORED: frozenset[str] = frozenset(get_args(JudgeOutcome)) - {"scored"}


def stratum_of(sampled: Sampled, sample_rate: float) -> Stratum:
    """Why the sampler took the trace: an always-sample kind, the base rate, or the floor."""
    if sampled.reason != "rate":
        return sampled.reason
    trace = sampled.trace
    return "random" if trace_fraction(trace.pair_id or trace.trace_id) < sample_rate else "floor"


def pair_record(sampled: Sampled, stratum: Stratum, slicer: Slicer) -> dict[str, Any]:
    """What a scorer needs of a sampled trace (triaged: it has an answer and a premise),
    with the production slices it counts the verdict in."""
    trace = sampled.trace
    variant = variant_of(trace)
    slices = slicer.of(trace) if variant == PRODUCTION else ()
    return {
        "trace_id": trace.trace_id,
        "span_id": trace.root_span_id,
        "premise": premise_of(trace),
        "answer": (trace.answer or "").strip(),
        "question": trace.query,
        "variant": variant,
        "service": trace.service_name or UNKNOWN_SERVICE,
        "stratum": stratum,
        **({"slices": slices_record(slices)} if slices else {}),
    }


def score_record(score: JudgeScore, variant: str, service: str) -> dict[str, Any]:
    return {
        "trace_id": score.trace_id,
        "score": score.score,
        "threshold": score.threshold,
        "judge": score.judge,
        **verdict_parts_record(score.spans, score.tiers),
        "variant": variant,
        "service": service,
    }


def unscored_record(answer: UnscoredAnswer, variant: str, service: str) -> dict[str, Any]:
    return {
        "trace_id": answer.trace_id,
        "outcome": answer.outcome,
        "judge": answer.judge,
        "variant": variant,
        "service": service,
    }


def verdict_from_record(value: bytes) -> JudgeScore | UnscoredAnswer:
    """Raises ValueError, KeyError or TypeError on a record that is neither a score nor an
    outcome a scorer's judge ends with."""
    record = orjson.loads(value)
    if "score" not in record:
        outcome = str(record["outcome"])
        if outcome not in UNSCORED:
            raise ValueError("not an outcome of a scorer's judge")
        return UnscoredAnswer(
            str(record["trace_id"]), outcome, judge=bounded_judge(record["judge"])
        )
    score = float(record["score"])
    if not 0.0 <= score <= 1.0:
        raise ValueError("score outside [0, 1]")
    return JudgeScore(
        str(record["trace_id"]),
        score,
        float(record["threshold"]),
        judge=bounded_judge(record["judge"]),
        spans=spans_from_record(record.get("spans", [])),
        tiers=tiers_from_record(record.get("tiers", [])),
    )


class PairPublisher:
    """Publishes the sampler's queue to the requests topic on its own worker; reads the
    results topic whole and emits each verdict into the pipeline."""

    def __init__(
        self,
        config: FaithfulnessConfig,
        kafka: KafkaConnection,
        source: queue.Queue[Sampled],
        registry: SidecarRegistry,
        emit: Callable[[Event], bool] | None,
        *,
        slicer: Slicer,
    ) -> None:
        self._config = config
        self._slicer = slicer
        self._emit = emit
        settings = client_settings(kafka)
        published = Counter(
            PUBLISHED_TOTAL,
            "Sampled pairs a sidecar published for the scorers (judge_location: kafka), by "
            "stratum and outcome (ok, failed: the broker refused or was away).",
            ["stratum", "outcome"],
            registry=registry,
        )
        self._read = Counter(
            RESULTS_READ_TOTAL,
            "Verdict records a sidecar read from the results topic, by outcome (ok: fed to the "
            "pipeline, invalid: neither a score nor a judge's outcome).",
            ["outcome"],
            registry=registry,
        )
        self._stratum: Stratum = "random"

        def sent(_topic: str, ok: bool) -> None:
            published.labels(self._stratum, "ok" if ok else "failed").inc()

        self._publisher = TopicPublisher(settings, sent, "faithfulness")
        self._worker: Worker[Sampled] = Worker(
            "faithfulness-publisher",
            handle=self._publish,
            source=source,
            batch_size=64,
            finish=self._publisher.close,
            drain_s=5.0,
            supervisor=registry.supervisor,
        )
        self._reader = WholeTopicReader(
            "faithfulness-results", settings, [config.remote.results_topic], self._take, registry
        )

    @property
    def accepting(self) -> bool:
        return True

    def start(self) -> None:
        self._worker.start()
        self._reader.start()

    def shutdown(self) -> None:
        self._worker.stop()
        self._reader.shutdown()

    def _publish(self, batch: list[Sampled]) -> None:
        topic = self._config.remote.requests_topic
        for sampled in batch:
            self._stratum = stratum_of(sampled, self._config.sample_rate)
            record = pair_record(sampled, self._stratum, self._slicer)
            self._publisher.send(topic, sampled.trace.trace_id, record)
        self._publisher.flush()

    def _take(self, _topic: str, value: bytes) -> None:
        try:
            verdict = verdict_from_record(value)
        except (ValueError, KeyError, TypeError):
            self._read.labels("invalid").inc()
            return
        self._read.labels("ok").inc()
        if self._emit is not None:
            self._emit(verdict)
