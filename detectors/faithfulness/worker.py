"""The scoring worker: one thread that owns the judge and turns sampled traces into
evaluations.

It loads the judge on its own thread (the sidecar serves while it loads; HHEM with
``precision: auto`` also measures the candidate precisions there, see ``precision.py``),
then takes up to the judge's batch size of sampled traces at a time, waiting at most
``MAX_BATCH_WAIT_S`` for a batch to fill. The detector settled every trace the judge
need not see before it was queued (``triage.py``): each one here has an answer and a
premise. The judge (``judge_contract.py``) returns a score, no claims, or an error per trace; an
error is counted, never a score.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import structlog

from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import ModelMissingError
from detectors.faithfulness.judge_choice import open_judge
from detectors.faithfulness.judge_contract import (
    Judge,
    JudgePair,
    JudgeUnavailable,
    WorkerStats,
    batch_size_for,
)
from detectors.faithfulness.openai_chat import MAX_RETRY_WAIT_S
from detectors.faithfulness.precision import CalibrationCancelled
from detectors.faithfulness.triage import Outcome, premise_of
from monitor.contract.sampler import Sampled
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace, Spans, TierVerdict
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.faithfulness")

WorkerState = Literal["loading", "ready", "missing", "failed", "stopped"]

MAX_BATCH_WAIT_S = 0.05
# Stop waits this long for the batch in progress; what is still queued is not scored.
STOP_TIMEOUT_S = 30.0
STALL_S = 120.0  # one batch on a CPU may take seconds; loading the model is not counted

__all__ = ["Evaluation", "ScoringWorker", "WorkerState", "WorkerStats"]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The verdict on one sampled trace."""

    trace: RagTrace
    outcome: Outcome
    score: float | None = None
    truncated: bool = False
    spans: Spans = ()  # the judge's unsupported parts of the answer, when it finds them
    tiers: tuple[TierVerdict, ...] = ()  # a cascade's tiers


def stall_after_s(config: FaithfulnessConfig) -> float:
    """How long one batch may take before the worker counts as stalled: an LLM judge may
    retry each of its two requests per answer, each attempt waiting up to its timeout and
    then up to the longest backoff it honours."""
    if config.judge in ("hhem", "token_classifier"):
        return STALL_S
    llm = config.llm_judge
    return STALL_S + 2 * (llm.max_retries + 1) * (llm.timeout_s + MAX_RETRY_WAIT_S)


class ScoringWorker:
    """Judges sampled traces on one thread; reports evaluations through ``on_evaluation``."""

    def __init__(
        self,
        config: FaithfulnessConfig,
        source: queue.Queue[Sampled],
        on_evaluation: Callable[[Evaluation], None],
        on_state: Callable[[WorkerState], None],
        on_stats: Callable[[WorkerStats], None] = lambda _: None,
        *,
        load: Callable[[], Judge] | None = None,
        registry: SidecarRegistry | None = None,
    ) -> None:
        self._config = config
        self._on_evaluation = on_evaluation
        self._on_state = on_state
        self._on_stats = on_stats
        self._registry = registry
        self._load = load or self._open_judge
        self._logged_failure = False
        self._judge: Judge | None = None
        self._stopping = threading.Event()  # cuts a calibration and an LLM judge's retries short
        self.state: WorkerState = "loading"
        self._worker: Worker[Sampled] = Worker(
            "faithfulness",
            handle=self._score_batch,
            source=source,
            batch_size=batch_size_for(config),
            batch_wait_s=MAX_BATCH_WAIT_S,
            tick_s=0.1,
            setup=self._load_judge,
            finish=self._finish,
            drain_s=0.0,
            stop_timeout_s=STOP_TIMEOUT_S,
            stall_after_s=stall_after_s(config),
            supervisor=registry.supervisor if registry is not None else None,
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
        """False once the judge turned out missing or broken: sampling would only drop."""
        return self.state in ("loading", "ready")

    def evaluate(self, judge: Judge, batch: Sequence[Sampled]) -> list[Evaluation]:
        """Judge sampled traces (triaged: each has an answer and a premise)."""
        pairs = [
            JudgePair(premise_of(s.trace), (s.trace.answer or "").strip(), s.trace.query)
            for s in batch
        ]
        results = judge.score(pairs)
        return [
            Evaluation(
                sampled.trace,
                result.outcome,
                result.score,
                result.truncated,
                result.spans,
                result.tiers,
            )
            for sampled, result in zip(batch, results, strict=True)
        ]

    def _open_judge(self) -> Judge:
        return open_judge(
            self._config, registry=self._registry, on_stats=self._on_stats, stopping=self._stopping
        )

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        self._on_state(state)

    def _load_judge(self) -> bool:
        """On the worker's thread, before its loop: False ends the worker (no judge)."""
        model = (
            self._config.token_classifier.model
            if self._config.judge == "token_classifier"
            else self._config.model
        )
        try:
            self._judge = self._load()
        except ModelMissingError as exc:
            log.warning("faithfulness_model_missing", model=model, how_to_fix=str(exc))
            self._set_state("missing")
            return False
        except JudgeUnavailable as exc:
            log.warning(exc.event, judge=self._config.judge, how_to_fix=exc.how_to_fix)
            self._set_state("missing")
            return False
        except CalibrationCancelled:
            self._set_state("stopped")
            return False
        except Exception:
            log.exception("faithfulness_model_failed", judge=self._config.judge, model=model)
            self._set_state("failed")
            return False
        self._set_state("ready")
        return True

    def _score_batch(self, batch: list[Sampled]) -> None:
        assert self._judge is not None
        try:
            evaluations = self.evaluate(self._judge, batch)
        except Exception:  # a bug here must not end the worker
            if not self._logged_failure:  # one stack trace; the error outcome counts the rest
                self._logged_failure = True
                log.exception("faithfulness_evaluation_failed")
            evaluations = [Evaluation(s.trace, "error") for s in batch]
        for evaluation in evaluations:
            self._on_evaluation(evaluation)

    def _finish(self) -> None:
        if self._judge is not None:
            self._judge.close()
        if self._worker.state == "dead":
            self._set_state("failed")
        elif self.state == "ready":
            self._set_state("stopped")
