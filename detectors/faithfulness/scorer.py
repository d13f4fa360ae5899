"""The scorer role: ``rag-monitor score`` judges the pairs the sidecars publish.

It reads ``remote.requests_topic`` in the scorers' consumer group (``remote.group_id``):
Kafka spreads the partitions over the scorers and moves a dead one's to the others. Each
poll's pairs are sorted by length and judged in the judge's batches (``open_judge``: HHEM
or an LLM), the scores exported on this process's ``/metrics`` under the same names as an
inline judge's (``rag_faithfulness_*``, labelled with the pair's variant), so that the
series add up across sidecars and scorers. Each verdict goes to ``remote.results_topic``:
a ``JudgeScore`` record, or an ``UnscoredAnswer`` one when the judge gave no score (error,
no_claims); the poll's offsets are committed only after its verdicts are flushed (at
least once). A redelivered pair whose trace id this scorer, or another one
through the results topic, scored lately is counted as a duplicate and not judged again.
What it keeps and sheds: ``scorer_budget.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import CommitFailedError, KafkaError
from prometheus_client import Counter, Gauge

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.detector import FaithfulnessMetrics
from detectors.faithfulness.judge_contract import Judge, JudgePair, JudgeResult, WorkerStats
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.names import (
    SCORER_PAIRS_TOTAL,
    SCORER_PARTITIONS,
    SCORES_PUBLISHED_TOTAL,
)
from detectors.faithfulness.remote import score_record, unscored_record
from detectors.faithfulness.scorer_budget import FloorBudget, SeenTraces
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.replication import WholeTopicReader, client_settings
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slice, Slicer
from monitor.contract.trace import JudgeScore, UnscoredAnswer

log = structlog.get_logger("rag_monitor.scorer")

POLL_MS = 200
MAX_POLL_RECORDS = 64  # pairs judged between two commits: a crash re-reads at most these
RETRY_S = 1.0
_CONSUMER_DEFAULTS = {"bootstrap_timeout_ms": 5000, "reconnect_backoff_max_ms": 5000}


@dataclass(frozen=True, slots=True)
class Pair:
    """A published pair as the scorer reads it."""

    trace_id: str
    premise: str
    answer: str
    question: str | None
    variant: str
    service: str
    stratum: str
    slices: tuple[Slice, ...] = ()  # production's slices the verdict counts in

    @classmethod
    def from_record(cls, value: bytes, slicer: Slicer) -> Pair:
        """Raises ValueError, KeyError or TypeError on a record that is not a pair, or whose
        slices are not ones ``slicer`` (the same configuration's) gives."""
        record = orjson.loads(value)
        fields = {name: record[name] for name in ("trace_id", "premise", "answer")}
        if not all(isinstance(text, str) and text for text in fields.values()):
            raise ValueError("trace_id, premise and answer must be non-empty strings")
        question = record.get("question")
        return cls(
            **fields,
            question=question if isinstance(question, str) else None,
            variant=str(record["variant"]),
            service=str(record["service"]),
            stratum=str(record["stratum"]),
            slices=slicer.from_record(record.get("slices")),
        )


class ScorerMetrics(FaithfulnessMetrics):
    """The inline detector's metrics plus what only a scorer does."""

    def __init__(self, registry: SidecarRegistry, judge: str, slicer: Slicer) -> None:
        super().__init__(registry, judge, slicer)
        self.pairs = Counter(
            SCORER_PAIRS_TOTAL,
            "Pairs a scorer read, by stratum and outcome: judged, duplicate (redelivered, "
            "judged lately), floor_met and capacity (shed), invalid (not a pair).",
            ["stratum", "outcome"],
            registry=registry,
        )
        self.published = Counter(
            SCORES_PUBLISHED_TOTAL,
            "Verdicts (scores, unscored outcomes) a scorer published to the results topic, "
            "by outcome (ok, failed).",
            ["outcome"],
            registry=registry,
        )
        self.partitions = Gauge(
            SCORER_PARTITIONS,
            "Partitions of the requests topic this scorer owns now.",
            registry=registry,
        )


class Scorer:
    """Consumes pairs, judges them, publishes and exports the scores; ``run`` owns a thread."""

    def __init__(
        self,
        config: FaithfulnessConfig,
        kafka: KafkaConnection,
        registry: SidecarRegistry,
        slicer: Slicer | None = None,
    ) -> None:
        self.config = config
        self._judge_name = judge_identity(config)
        self._slicer = slicer or Slicer()
        self.metrics = ScorerMetrics(registry, self._judge_name, self._slicer)
        self._settings = client_settings(kafka)
        self._consumer_settings = {**_CONSUMER_DEFAULTS, **kafka.consumer, **self._settings}
        self.seen = SeenTraces(config.remote.dedupe_size)
        self.budget = FloorBudget(
            config.min_scored_per_hour, config.remote.floor_burst_s, config.max_per_second
        )
        self.ready = threading.Event()  # the judge loaded and the group joined
        # Verdicts sent since the last flush: a pair redelivered after a failed flush is sent
        # again from here, not judged again.
        self._unsent: dict[str, dict[str, Any]] = {}
        self._results = WholeTopicReader(
            "scorer-results", self._settings, [config.remote.results_topic], self._seen, registry
        )

    def _seen(self, _topic: str, value: bytes) -> None:
        try:
            self.seen.add(str(orjson.loads(value)["trace_id"]))
        except (ValueError, KeyError, TypeError):
            return

    def on_stats(self, stats: WorkerStats) -> None:
        self.metrics.model_pairs.inc(stats.pairs)
        self.metrics.model_seconds.inc(stats.seconds)
        self.metrics.cache_hits.inc(stats.cache_hits)

    def run(self, judge: Judge, stop: threading.Event) -> None:
        """Judge until ``stop``; a broker outage is waited out with a fresh consumer."""
        self._results.start()
        producer = KafkaProducer(**self._settings, acks="all", linger_ms=5)
        try:
            while not stop.is_set():
                try:
                    self._consume(judge, producer, stop)
                except KafkaError as exc:
                    log.warning("scorer_kafka_failed", error=type(exc).__name__)
                    stop.wait(RETRY_S)
        finally:
            self._results.shutdown()
            producer.close(timeout=5)

    def _consume(self, judge: Judge, producer: KafkaProducer, stop: threading.Event) -> None:
        consumer = KafkaConsumer(
            **self._consumer_settings,
            group_id=self.config.remote.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        topic = self.config.remote.requests_topic
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                batches = consumer.poll(timeout_ms=POLL_MS, max_records=MAX_POLL_RECORDS)
                owned = len(consumer.assignment())
                self.metrics.partitions.set(owned)
                self.budget.set_share(owned, len(consumer.partitions_for_topic(topic) or ()))
                if owned:
                    self.ready.set()
                records = [record for batch in batches.values() for record in batch]
                if not records:
                    continue
                self.handle(judge, [record.value for record in records], producer)
                producer.flush(timeout=30)  # raises when a score did not go out: no commit
                self._unsent.clear()
                try:
                    consumer.commit()  # after the scores are out: at least once
                except CommitFailedError:  # partitions moved: their pairs come back
                    log.info("scorer_commit_refused")
        finally:
            self.metrics.partitions.set(0)
            consumer.close()

    def handle(self, judge: Judge, values: Sequence[bytes], producer: KafkaProducer) -> None:
        """Admit, judge and publish one poll's pairs."""
        admitted: list[Pair] = []
        for value in values:
            try:
                pair = Pair.from_record(value, self._slicer)
            except (ValueError, KeyError, TypeError):
                self.metrics.pairs.labels("unknown", "invalid").inc()
                continue
            if not self.seen.add(pair.trace_id):
                self.metrics.pairs.labels(pair.stratum, "duplicate").inc()
                unsent = self._unsent.get(pair.trace_id)
                if unsent is not None:
                    self._send(unsent, producer)
                continue
            decision = self.budget.decide(pair.service, pair.stratum)
            if decision != "judge":
                self.metrics.pairs.labels(pair.stratum, decision).inc()
                continue
            admitted.append(pair)
        admitted.sort(key=lambda p: len(p.premise) + len(p.answer))
        size = max(1, judge.batch_size)
        for start in range(0, len(admitted), size):
            chunk = admitted[start : start + size]
            for pair, result in zip(chunk, self._judge(judge, chunk), strict=True):
                self._record(pair, result, producer)

    def _judge(self, judge: Judge, pairs: list[Pair]) -> list[JudgeResult]:
        try:
            return judge.score([JudgePair(p.premise, p.answer, p.question) for p in pairs])
        except Exception:  # a bug in a judge must not end the scorer; counted as error
            log.exception("scorer_judge_failed")
            return [JudgeResult.failed("model_error") for _ in pairs]

    def _record(self, pair: Pair, result: JudgeResult, producer: KafkaProducer) -> None:
        self.metrics.pairs.labels(pair.stratum, "judged").inc()
        self.metrics.evaluations[result.outcome][pair.variant].inc()
        if result.outcome != "scored" or result.score is None:
            outcome = "error" if result.outcome == "scored" else result.outcome
            unscored = UnscoredAnswer(pair.trace_id, outcome, self._judge_name)
            self._publish(pair, unscored_record(unscored, pair.variant, pair.service), producer)
            return
        self.metrics.score[pair.variant].observe(result.score)
        below = result.score < self.config.threshold
        if below:
            self.metrics.below_threshold[pair.variant].inc()
        self.metrics.count_slices(pair.slices, below)
        if result.truncated:
            self.metrics.truncated.inc()
        score = JudgeScore(
            pair.trace_id,
            result.score,
            self.config.threshold,
            self._judge_name,
            result.spans,
            result.tiers,
        )
        self._publish(pair, score_record(score, pair.variant, pair.service), producer)

    def _publish(self, pair: Pair, record: dict[str, Any], producer: KafkaProducer) -> None:
        self._unsent[pair.trace_id] = record
        self._send(record, producer)

    def _send(self, record: dict[str, Any], producer: KafkaProducer) -> None:
        try:
            producer.send(
                self.config.remote.results_topic,
                key=str(record["trace_id"]).encode(),
                value=orjson.dumps(record),
            )
        except KafkaError:
            self.metrics.published.labels("failed").inc()
            return
        self.metrics.published.labels("ok").inc()
