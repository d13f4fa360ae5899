"""The scoring worker: one thread that owns the HHEM model and turns sampled traces into
evaluations.

It loads the model on its own thread (the sidecar serves while it loads; with
``precision: auto`` it also measures the candidate precisions there, see
``precision.py``), then takes up to ``batch_size`` sampled traces at a time, waiting at most
``MAX_BATCH_WAIT_S`` for a batch to fill. The detector settled every trace the model
need not see before it was queued (``triage.py``): each one here has an answer and a
premise. Their (premise, hypothesis) pairs are looked up in an LRU cache, tokenized,
sorted by length and scored in batches whose padding stays small, all under
``torch.inference_mode``.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import structlog
from prometheus_client import CollectorRegistry, Gauge

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import (
    HhemScorer,
    ModelMissingError,
    PreparedPair,
    length_batches,
    read_checkpoint,
    set_threads,
)
from detectors.faithfulness.precision import CalibrationCancelled, calibrate
from detectors.faithfulness.triage import Outcome, premise_of, split_sentences
from monitor.sampler import Sampled
from monitor.trace import RagTrace
from monitor.worker import Worker

if TYPE_CHECKING:
    from detectors.faithfulness.hhem import HhemCheckpoint

log = structlog.get_logger("rag_monitor.faithfulness")

WorkerState = Literal["loading", "ready", "missing", "failed", "stopped"]

MAX_BATCH_WAIT_S = 0.05
# Stop waits this long for the batch in progress; what is still queued is not scored.
STOP_TIMEOUT_S = 30.0
STALL_S = 120.0  # one batch on a CPU may take seconds; loading the model is not counted


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The verdict on one sampled trace."""

    trace: RagTrace
    outcome: Outcome
    score: float | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """Model work done, reported after each scored batch."""

    pairs: int
    seconds: float
    cache_hits: int


def pair_key(premise: str, hypothesis: str) -> bytes:
    """A cache key for a pair; the texts themselves are not kept."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(premise.encode("utf-8", "surrogatepass"))
    digest.update(b"\0")
    digest.update(hypothesis.encode("utf-8", "surrogatepass"))
    return digest.digest()


class ScoreCache:
    """Least-recently-used scores by pair key, with the premise-truncation flag."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, tuple[float, bool]] = OrderedDict()

    def get(self, key: bytes) -> tuple[float, bool] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: bytes, score: float, truncated: bool) -> None:
        if self._size <= 0:
            return
        self._entries[key] = (score, truncated)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class _Job:
    sampled: Sampled
    premise: str
    hypotheses: list[str]
    keys: list[bytes] = field(default_factory=list)


class ScoringWorker:
    """Scores sampled traces on one thread; reports evaluations through ``on_evaluation``."""

    def __init__(
        self,
        config: FaithfulnessConfig,
        source: queue.Queue[Sampled],
        on_evaluation: Callable[[Evaluation], None],
        on_state: Callable[[WorkerState], None],
        on_stats: Callable[[WorkerStats], None] = lambda _: None,
        *,
        load: Callable[[HhemCheckpoint], HhemScorer] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._config = config
        self._on_evaluation = on_evaluation
        self._on_state = on_state
        self._on_stats = on_stats
        self._load = load or self._load_scorer
        self._cache = ScoreCache(config.cache_size)
        self._batch_size = config.batch_size or (1 if config.device.startswith("cpu") else 8)
        self._logged_failure = False
        self._scorer: HhemScorer | None = None
        self._stopping = threading.Event()  # cuts a calibration short
        self._precision_info = Gauge(
            "rag_faithfulness_precision_info",
            "1 for the precision the HHEM model runs in (chosen by measurement when "
            "detectors.faithfulness.precision is auto); absent until the model is loaded.",
            ["precision"],
            registry=registry,
        )
        self.state: WorkerState = "loading"
        self._worker: Worker[Sampled] = Worker(
            "faithfulness",
            handle=self._score_batch,
            source=source,
            batch_size=self._batch_size,
            batch_wait_s=MAX_BATCH_WAIT_S,
            tick_s=0.1,
            setup=self._load_model,
            finish=self._finish,
            drain_s=0.0,
            stop_timeout_s=STOP_TIMEOUT_S,
            stall_after_s=STALL_S,
            registry=registry,
        )

    def start(self) -> None:
        self._worker.start()

    def shutdown(self) -> None:
        """Stop after the batch in progress; what is still queued is not scored but counted
        dropped. Safe twice."""
        self._stopping.set()
        self._worker.stop()

    @property
    def accepting(self) -> bool:
        """False once the model turned out missing or broken: sampling would only drop."""
        return self.state in ("loading", "ready")

    def evaluate(self, scorer: HhemScorer, batch: Sequence[Sampled]) -> list[Evaluation]:
        """Score sampled traces (triaged: each has an answer and a premise)."""
        evaluations: list[Evaluation] = []
        jobs: list[_Job] = []
        for sampled in batch:
            answer = (sampled.trace.answer or "").strip()
            hypotheses = (
                [answer] if self._config.granularity == "answer" else split_sentences(answer)
            )
            premise = premise_of(sampled.trace)
            jobs.append(
                _Job(sampled, premise, hypotheses, [pair_key(premise, h) for h in hypotheses])
            )
        results, failed, hits = self._score_pairs(scorer, jobs)
        for job in jobs:
            if any(key in failed for key in job.keys):
                evaluations.append(Evaluation(job.sampled.trace, "error"))
                continue
            scores = [results[key][0] for key in job.keys]
            truncated = any(results[key][1] for key in job.keys)
            if self._config.granularity == "answer":
                score = scores[0]
            else:
                threshold = self._config.threshold
                score = sum(s >= threshold for s in scores) / len(scores)
            evaluations.append(Evaluation(job.sampled.trace, "scored", score, truncated))
        if hits:
            self._on_stats(WorkerStats(0, 0.0, hits))
        return evaluations

    def _score_pairs(
        self, scorer: HhemScorer, jobs: Sequence[_Job]
    ) -> tuple[dict[bytes, tuple[float, bool]], set[bytes], int]:
        results: dict[bytes, tuple[float, bool]] = {}
        failed: set[bytes] = set()
        hits = 0
        pending: dict[bytes, tuple[str, str]] = {}
        for job in jobs:
            for key, hypothesis in zip(job.keys, job.hypotheses, strict=True):
                if key in results or key in pending:
                    continue
                cached = self._cache.get(key)
                if cached is not None:
                    results[key] = cached
                    hits += 1
                else:
                    pending[key] = (job.premise, hypothesis)
        keys = list(pending)
        prepared: list[PreparedPair] = []
        for key in list(keys):
            try:
                prepared.append(scorer.prepare(*pending[key]))
            except Exception:
                self._failure("faithfulness_tokenize_failed")
                failed.add(key)
                keys.remove(key)
        for indices in length_batches(prepared, self._batch_size):
            started = time.perf_counter()
            try:
                scores = scorer.score_prepared([prepared[i] for i in indices])
            except Exception:
                self._failure("faithfulness_scoring_failed")
                failed.update(keys[i] for i in indices)
                continue
            self._on_stats(WorkerStats(len(indices), time.perf_counter() - started, 0))
            for i, score in zip(indices, scores, strict=True):
                results[keys[i]] = (score, prepared[i].truncated)
                self._cache.put(keys[i], score, prepared[i].truncated)
        return results, failed, hits

    def _failure(self, event: str) -> None:
        # One stack trace per worker; the error outcome counts every later one.
        if not self._logged_failure:
            self._logged_failure = True
            log.exception(event)

    def _load_scorer(self, checkpoint: HhemCheckpoint) -> HhemScorer:
        set_threads(self._config.threads)
        precision = self._config.precision
        scorer = HhemScorer(
            checkpoint,
            device=self._config.device,
            precision="fp32" if precision == "auto" else precision,
            max_premise_tokens=self._config.max_premise_tokens,
        )
        if precision != "auto":
            return scorer
        started = time.perf_counter()
        scorer, choice = calibrate(
            scorer,
            threshold=self._config.threshold,
            tolerance=self._config.precision_tolerance,
            batch_size=self._batch_size,
            cancelled=self._stopping.is_set,
        )
        log.info(
            "faithfulness_precision_chosen",
            **choice.log_fields(),
            tolerance=self._config.precision_tolerance,
            threshold=self._config.threshold,
            seconds=round(time.perf_counter() - started, 2),
        )
        return scorer

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        self._on_state(state)

    def _load_model(self) -> bool:
        """On the worker's thread, before its loop: False ends the worker (no model)."""
        model = self._config.model
        try:
            checkpoint = read_checkpoint(model)
            started = time.perf_counter()
            self._scorer = self._load(checkpoint)
        except ModelMissingError as exc:
            log.warning("faithfulness_model_missing", model=model, how_to_fix=str(exc))
            self._set_state("missing")
            return False
        except CalibrationCancelled:
            self._set_state("stopped")
            return False
        except Exception:
            log.exception("faithfulness_model_failed", model=model)
            self._set_state("failed")
            return False
        import torch

        self._precision_info.labels(self._scorer.precision).set(1)
        log.info(
            "faithfulness_model_loaded",
            model=model,
            precision=self._scorer.precision,
            device=self._config.device,
            batch_size=self._batch_size,
            threads=torch.get_num_threads(),
            seconds=round(time.perf_counter() - started, 2),
        )
        self._set_state("ready")
        return True

    def _score_batch(self, batch: list[Sampled]) -> None:
        import torch

        assert self._scorer is not None
        with torch.inference_mode():
            try:
                evaluations = self.evaluate(self._scorer, batch)
            except Exception:  # a bug here must not end the worker
                self._failure("faithfulness_evaluation_failed")
                evaluations = [Evaluation(s.trace, "error") for s in batch]
        for evaluation in evaluations:
            self._on_evaluation(evaluation)

    def _finish(self) -> None:
        if self._worker.state == "dead":
            self._set_state("failed")
        elif self.state == "ready":
            self._set_state("stopped")
