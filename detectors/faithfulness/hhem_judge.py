"""The ``hhem`` judge: HHEM-2.1-Open behind the ``Judge`` interface.

Loading reads the checkpoint, sets torch's threads and, with ``precision: auto``,
measures the candidate precisions (``precision.py``). Scoring turns each pair into
one hypothesis (the answer) or one per sentence (``granularity: sentence``: the score
is then the share of sentences at or above ``threshold``), looks each (premise,
hypothesis) up in an LRU cache, tokenizes the rest, sorts them by length and scores
them in micro-batches whose padding stays small, all under ``torch.inference_mode``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import structlog
from prometheus_client import Gauge

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import (
    HhemScorer,
    PreparedPair,
    length_batches,
    read_checkpoint,
    set_threads,
)
from detectors.faithfulness.judge_contract import (
    JudgePair,
    JudgeResult,
    ScoreCache,
    WorkerStats,
    batch_size_for,
    pair_key,
)
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.names import PRECISION_INFO
from detectors.faithfulness.precision import calibrate
from detectors.faithfulness.triage import split_sentences

if TYPE_CHECKING:
    from monitor.contract.sidecar_registry import SidecarRegistry

log = structlog.get_logger("rag_monitor.faithfulness")


@dataclass
class _Job:
    premise: str
    hypotheses: list[str]
    keys: list[bytes] = field(default_factory=list)


class HhemJudge:
    """HHEM scores of (premise, answer) pairs; thread-confined to the scoring worker."""

    def __init__(
        self,
        scorer: HhemScorer,
        *,
        name: str = "hhem",
        granularity: Literal["answer", "sentence"] = "answer",
        threshold: float = 0.5,
        batch_size: int = 1,
        cache_size: int = 0,
        on_stats: Callable[[WorkerStats], None] = lambda _: None,
    ) -> None:
        self.name = name
        self.scorer = scorer
        self.batch_size = batch_size
        self._granularity = granularity
        self._threshold = threshold
        self._cache: ScoreCache[tuple[float, bool]] = ScoreCache(cache_size)
        self._on_stats = on_stats
        self._logged_failure = False

    def score(self, pairs: Sequence[JudgePair]) -> list[JudgeResult]:
        import torch

        jobs = []
        for pair in pairs:
            answer = pair.answer.strip()
            hypotheses = [answer] if self._granularity == "answer" else split_sentences(answer)
            jobs.append(
                _Job(pair.premise, hypotheses, [pair_key(pair.premise, h) for h in hypotheses])
            )
        with torch.inference_mode():
            results, failed, hits = self._score_pairs(jobs)
        if hits:
            self._on_stats(WorkerStats(0, 0.0, hits))
        return [self._result(job, results, failed) for job in jobs]

    def close(self) -> None:
        """Nothing to release: the model goes with the judge."""

    def _result(
        self, job: _Job, results: dict[bytes, tuple[float, bool]], failed: set[bytes]
    ) -> JudgeResult:
        if any(key in failed for key in job.keys):
            return JudgeResult.failed("model_error")
        scores = [results[key][0] for key in job.keys]
        truncated = any(results[key][1] for key in job.keys)
        if self._granularity == "answer":
            return JudgeResult.scored(scores[0], truncated)
        supported = sum(s >= self._threshold for s in scores)
        return JudgeResult.scored(supported / len(scores), truncated)

    def _score_pairs(
        self, jobs: Sequence[_Job]
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
                prepared.append(self.scorer.prepare(*pending[key]))
            except Exception:
                self._failure("faithfulness_tokenize_failed")
                failed.add(key)
                keys.remove(key)
        for indices in length_batches(prepared, self.batch_size):
            started = time.perf_counter()
            try:
                scores = self.scorer.score_prepared([prepared[i] for i in indices])
            except Exception:
                self._failure("faithfulness_scoring_failed")
                failed.update(keys[i] for i in indices)
                continue
            self._on_stats(WorkerStats(len(indices), time.perf_counter() - started, 0))
            for i, score in zip(indices, scores, strict=True):
                results[keys[i]] = (score, prepared[i].truncated)
                self._cache.put(keys[i], (score, prepared[i].truncated))
        return results, failed, hits

    def _failure(self, event: str) -> None:
        # One stack trace per judge; the error outcome counts every later one.
        if not self._logged_failure:
            self._logged_failure = True
            log.exception(event)


def load_hhem_judge(
    config: FaithfulnessConfig,
    *,
    registry: SidecarRegistry | None,
    on_stats: Callable[[WorkerStats], None],
    stopping: threading.Event,
) -> HhemJudge:
    """Read the checkpoint, load it in the configured precision (``auto``: measured) and
    export ``rag_faithfulness_precision_info``; raises ``ModelMissingError`` without it."""
    import torch

    checkpoint = read_checkpoint(config.model)
    started = time.perf_counter()
    set_threads(config.threads)
    batch_size = batch_size_for(config)
    precision = config.precision
    scorer = HhemScorer(
        checkpoint,
        device=config.device,
        precision="fp32" if precision == "auto" else precision,
        max_premise_tokens=config.max_premise_tokens,
    )
    if precision == "auto":
        measured = time.perf_counter()
        scorer, choice = calibrate(
            scorer,
            threshold=config.threshold,
            tolerance=config.precision_tolerance,
            batch_size=batch_size,
            cancelled=stopping.is_set,
        )
        log.info(
            "faithfulness_precision_chosen",
            **choice.log_fields(),
            tolerance=config.precision_tolerance,
            threshold=config.threshold,
            seconds=round(time.perf_counter() - measured, 2),
        )
    if registry is not None:
        precision_info(registry).labels(scorer.precision).set(1)
    log.info(
        "faithfulness_model_loaded",
        model=config.model,
        precision=scorer.precision,
        device=config.device,
        batch_size=batch_size,
        threads=torch.get_num_threads(),
        seconds=round(time.perf_counter() - started, 2),
    )
    return HhemJudge(
        scorer,
        name=judge_identity(config),
        granularity=config.granularity,
        threshold=config.threshold,
        batch_size=batch_size,
        cache_size=config.cache_size,
        on_stats=on_stats,
    )


def precision_info(registry: SidecarRegistry) -> Gauge:
    """``rag_faithfulness_precision_info{precision}``, declared when the model is loaded."""
    return registry.family(
        Gauge,
        PRECISION_INFO,
        "1 for the precision the HHEM model runs in (chosen by measurement when "
        "detectors.faithfulness.precision is auto); absent until the model is loaded.",
        ["precision"],
    )
