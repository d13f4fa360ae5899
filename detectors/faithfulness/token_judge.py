"""The ``token_classifier`` judge: a LettuceDetect-style token classifier
(``token_classifier.py``: the model and its inputs) behind ``Judge``.

Per pair the judge returns the answer's score, 1 minus the highest hallucination
probability over its tokens, and the unsupported spans: the character ranges of the
answer covered by runs of consecutive flagged tokens. A token is flagged when
``1 - p < threshold``, the same comparison the caller makes with the score, so the spans
are non-empty exactly when the verdict is unsupported. The spans stay in memory: they go
to the caller in ``JudgeResult.spans`` and are never logged here.

Loading resolves the checkpoint, then loads it with transformers'
``AutoModelForTokenClassification``. Precisions: fp32, bf16_autocast, bf16 and int8
(dynamic int8 Linear layers, cpu), as for HHEM; ``auto`` means fp32 here (the
start-up measurement in ``precision.py`` is HHEM's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from detectors.faithfulness.hhem import (
    PreparedPair,
    length_batches,
    set_threads,
)
from detectors.faithfulness.judge_contract import (
    NO_CLAIMS,
    JudgePair,
    JudgeResult,
    ScoreCache,
    WorkerStats,
    batch_size_for,
    pair_key,
)
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.token_classifier import (
    TOKEN_PRECISIONS,
    AnswerTooLongError,
    EncodedPair,
    TokenClassifier,
    TokenPrecision,
    resolve_token_model,
)
from monitor.contract.trace import Spans

if TYPE_CHECKING:
    from detectors.faithfulness.config import FaithfulnessConfig
    from monitor.contract.sidecar_registry import SidecarRegistry


log = structlog.get_logger("rag_monitor.faithfulness")


def verdict(
    probabilities: Sequence[float], offsets: Sequence[tuple[int, int]], threshold: float
) -> tuple[float, Spans]:
    """The answer's score (1 - the highest probability) and its unsupported spans: runs of
    consecutive tokens with ``1 - p < threshold`` merged into one (start, end) each, and
    runs that touch or overlap merged too (the bytes of one character can fall in two
    tokens, one flagged and one not; lettucedetect then reports two overlapping spans).

    ``1 - p`` is computed once per token and the score is the least of them, so the score
    is under ``threshold`` exactly when some token is flagged: never a failing score
    without a span, nor a span on a passing answer.
    """
    supports = [1.0 - p for p in probabilities]
    spans: list[tuple[int, int]] = []
    previous_flagged = False
    for support, (start, end) in zip(supports, offsets, strict=True):
        flagged = support < threshold
        if flagged and spans and (previous_flagged or start <= spans[-1][1]):
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        elif flagged:
            spans.append((start, end))
        previous_flagged = flagged
    return min(supports), tuple(spans)


_Cached = tuple[float, bool, Spans]


class TokenJudge:
    """Token classifier verdicts on (premise, answer) pairs; thread-confined to the
    scoring worker."""

    def __init__(
        self,
        classifier: TokenClassifier,
        *,
        name: str = "token_classifier",
        threshold: float = 0.5,
        batch_size: int = 1,
        cache_size: int = 0,
        on_stats: Callable[[WorkerStats], None] = lambda _: None,
    ) -> None:
        self.name = name
        self.classifier = classifier
        self.batch_size = batch_size
        self._threshold = threshold
        self._cache: ScoreCache[_Cached] = ScoreCache(cache_size)
        self._on_stats = on_stats
        self._logged: set[str] = set()

    def score(self, pairs: Sequence[JudgePair]) -> list[JudgeResult]:
        results: dict[int, JudgeResult] = {}
        pending: dict[bytes, tuple[EncodedPair, list[int]]] = {}
        hits = 0
        for index, pair in enumerate(pairs):
            answer = pair.answer.strip()
            if not answer:
                results[index] = NO_CLAIMS
                continue
            # A blank question reads as none (the summarisation prompt): the models never
            # saw the question prompt with an empty question.
            question = pair.question if pair.question and pair.question.strip() else None
            key = _key(pair.premise, question, answer)
            if key in pending:
                pending[key][1].append(index)
                continue
            cached = self._cache.get(key)
            if cached is not None:
                hits += 1
                results[index] = JudgeResult.scored(cached[0], cached[1], cached[2])
                continue
            try:
                encoded = self.classifier.encode(pair.premise, question, answer)
            except AnswerTooLongError as exc:
                self._warn_once("faithfulness_answer_too_long", reason=str(exc))
                results[index] = JudgeResult.failed("model_error")
                continue
            except Exception:
                self._failure("faithfulness_tokenize_failed")
                results[index] = JudgeResult.failed("model_error")
                continue
            if encoded is None:
                results[index] = NO_CLAIMS
                continue
            pending[key] = (encoded, [index])
        if hits:
            self._on_stats(WorkerStats(0, 0.0, hits))
        if pending:
            self._run_batches(pending, results)
        return [results[i] for i in range(len(pairs))]

    def close(self) -> None:
        """Nothing to release: the model goes with the judge."""

    def _run_batches(
        self,
        pending: dict[bytes, tuple[EncodedPair, list[int]]],
        results: dict[int, JudgeResult],
    ) -> None:
        """Score every pending pair's chunks in length-sorted micro-batches (chunks of
        several pairs share a batch), then settle each pair whose chunks all ran."""
        keys = list(pending)
        chunks: list[tuple[int, int]] = []  # (pair, chunk) per flat chunk
        for pair_index, key in enumerate(keys):
            chunks.extend((pair_index, c) for c in range(len(pending[key][0].chunks)))
        highest = [[0.0] * len(pending[key][0].offsets) for key in keys]
        remaining = [len(pending[key][0].chunks) for key in keys]
        failed: set[int] = set()
        flat = [pending[keys[p]][0].chunks[c] for p, c in chunks]
        prepared = [PreparedPair(chunk.input_ids, chunk.truncated) for chunk in flat]
        for indices in length_batches(prepared, self.batch_size):
            started = time.perf_counter()
            try:
                batch = self.classifier.chunk_probabilities([flat[i] for i in indices])
            except Exception:
                self._failure("faithfulness_scoring_failed")
                failed.update(chunks[i][0] for i in indices)
                batch = []
            done = 0
            for i, probabilities in zip(indices, batch, strict=False):
                pair_index = chunks[i][0]
                highest[pair_index] = [
                    max(a, b) for a, b in zip(highest[pair_index], probabilities, strict=True)
                ]
            for i in indices:
                pair_index = chunks[i][0]
                remaining[pair_index] -= 1
                if remaining[pair_index] == 0 and pair_index not in failed:
                    done += 1
            if batch:
                self._on_stats(WorkerStats(done, time.perf_counter() - started, 0))
        for pair_index, key in enumerate(keys):
            encoded, indices = pending[key]
            if pair_index in failed:
                result = JudgeResult.failed("model_error")
            else:
                score, spans = verdict(highest[pair_index], encoded.offsets, self._threshold)
                self._cache.put(key, (score, encoded.truncated, spans))
                result = JudgeResult.scored(score, encoded.truncated, spans)
            for index in indices:
                results[index] = result

    def _failure(self, event: str) -> None:
        # One stack trace per judge and event; the error outcome counts every later one.
        if event not in self._logged:
            self._logged.add(event)
            log.exception(event)

    def _warn_once(self, event: str, **fields: Any) -> None:
        if event not in self._logged:
            self._logged.add(event)
            log.warning(event, **fields)


def _key(premise: str, question: str | None, answer: str) -> bytes:
    """The cache key: the question is part of the model's input, so of the key too
    (length-prefixed, so no question and answer pair reads as another)."""
    asked = "-" if question is None else f"{len(question)}:{question}"
    return pair_key(premise, f"{asked}\0{answer}")


def load_token_judge(
    config: FaithfulnessConfig,
    *,
    registry: SidecarRegistry | None,
    on_stats: Callable[[WorkerStats], None],
    stopping: threading.Event,
) -> TokenJudge:
    """Resolve the checkpoint (``ModelMissingError`` without it), load it in the
    configured precision and export ``rag_faithfulness_precision_info``. Nothing is
    measured at start-up, so ``stopping`` has nothing to cut short."""
    import torch

    from detectors.faithfulness.hhem_judge import precision_info

    section = config.token_classifier
    directory = resolve_token_model(section.model)
    started = time.perf_counter()
    set_threads(config.threads)
    batch_size = batch_size_for(config)
    precision = token_precision(config.precision)
    classifier = TokenClassifier(
        directory, device=config.device, precision=precision, max_length=section.max_length
    )
    if registry is not None:
        precision_info(registry).labels(classifier.precision).set(1)
    log.info(
        "faithfulness_model_loaded",
        judge="token_classifier",
        model=section.model,
        precision=classifier.precision,
        device=config.device,
        batch_size=batch_size,
        max_length=classifier.max_length,
        threads=torch.get_num_threads(),
        seconds=round(time.perf_counter() - started, 2),
    )
    return TokenJudge(
        classifier,
        name=judge_identity(config),
        threshold=config.threshold,
        batch_size=batch_size,
        cache_size=config.cache_size,
        on_stats=on_stats,
    )


def token_precision(precision: str) -> TokenPrecision:
    """The configured precision for the token judge: ``auto`` is fp32 (no measurement);
    the ONNX ones are refused by the configuration before this runs."""
    if precision == "auto":
        return "fp32"
    for known in TOKEN_PRECISIONS:
        if precision == known:
            return known
    raise ValueError(f"precision {precision!r} does not apply to the token_classifier judge")
