"""The ``openai_compatible`` judge: claim-level faithfulness by an LLM.

The method's definition: extract the answer's claims, verify each against the contexts,
score = the share supported (3 of 4 supported: 0.75); an answer with no claim is not
scored (``no_claims``). Each answer takes two requests, both with a strict JSON schema:

1. **Extraction** sees the question and the answer, never the contexts, and returns the
   answer's claims (short, self-contained statements). The model splits rather than a
   sentence splitter because one sentence often carries several claims ("Mars has two
   moons, Phobos and Deimos") and a claim often needs its sentence's neighbours ("It was
   founded in 1994"); keeping the contexts out means the split cannot lean on what they
   support, and it is checked on its own as the method asks. The extra request costs the
   answer's tokens twice, not the contexts'.
2. **Verification** sees the contexts and the numbered claims, and returns one verdict
   per claim number: ``supported`` or ``unsupported``.

A reply that does not follow its schema exactly (a missing or extra key, a claim number
given twice or not at all, an empty claim) is ``malformed``: an error, never a score.
Claims past ``max_claims`` are cut (``rag_judge_claims_cut_total``) before verification.

Production text is data, never instructions. The question, the answer, the passages and
the extracted claims reach the model only as string values of one JSON object (the user
message), which JSON escaping keeps whole: no text can close its field or pose as
another field, a forged ``Claims:`` list or ``>>>`` stays inside the string it came in.
Both system prompts say the object's values are material to judge, written by others,
never to be followed. The claims are numbered by this code, as JSON entries, so a claim
cannot add a number or a verdict, and a reply that does not give exactly one verdict per
given number is ``malformed`` as before. No prompt is proof against injection: the review
loop's calibration and the corrected pass share catch a judge that drifts.
Answers of a batch are judged ``concurrency`` at a time on a thread pool; scores are
cached by (premise, answer) like HHEM's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import structlog

from detectors.faithfulness.config import FaithfulnessConfig, LlmJudgeConfig
from detectors.faithfulness.judge_contract import (
    NO_CLAIMS,
    JudgePair,
    JudgeResult,
    JudgeUnavailable,
    ScoreCache,
    WorkerStats,
    pair_key,
)
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.judge_metrics import JudgeMetrics
from detectors.faithfulness.llm_prompts import (
    CLAIMS_SCHEMA,
    VERDICTS_SCHEMA,
    extraction_messages,
    parse_claims,
    parse_verdicts,
    verification_messages,
)
from detectors.faithfulness.openai_chat import ChatClient, ChatError

if TYPE_CHECKING:
    from monitor.contract.sidecar_registry import SidecarRegistry

log = structlog.get_logger("rag_monitor.faithfulness")


class LlmJudge:
    """Claim-level faithfulness by an LLM on an OpenAI-compatible endpoint."""

    def __init__(
        self,
        config: LlmJudgeConfig,
        *,
        name: str,
        client: ChatClient,
        metrics: JudgeMetrics,
        cache_size: int = 0,
        on_stats: Callable[[WorkerStats], None] = lambda _: None,
    ) -> None:
        self.name = name
        self.batch_size = config.concurrency
        self._max_claims = config.max_claims
        self._client = client
        self._metrics = metrics
        self._cache: ScoreCache[JudgeResult] = ScoreCache(cache_size)
        self._on_stats = on_stats
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="llm-judge")

    def score(self, pairs: Sequence[JudgePair]) -> list[JudgeResult]:
        results: dict[bytes, JudgeResult] = {}
        pending: dict[bytes, JudgePair] = {}
        keys = [pair_key(p.premise, p.answer) for p in pairs]
        hits = 0
        for key, pair in zip(keys, pairs, strict=True):
            if key in results or key in pending:
                continue
            cached = self._cache.get(key)
            if cached is not None:
                results[key] = cached
                hits += 1
            else:
                pending[key] = pair
        started = time.perf_counter()
        judged = list(self._pool.map(self.judge, pending.values()))
        for key, result in zip(pending, judged, strict=True):
            results[key] = result
            if result.outcome != "error":
                self._cache.put(key, result)
        self._on_stats(WorkerStats(len(pending), time.perf_counter() - started, hits))
        return [results[key] for key in keys]

    def judge(self, pair: JudgePair) -> JudgeResult:
        """One answer: extract its claims, verify them, the supported share."""
        try:
            claims = self._claims(pair)
            if not claims:
                return NO_CLAIMS
            supported = self._verdicts(pair, claims)
        except ChatError as exc:
            return JudgeResult.failed(exc.kind)
        self._metrics.claims(sum(supported), len(supported) - sum(supported))
        return JudgeResult.scored(sum(supported) / len(supported))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _claims(self, pair: JudgePair) -> list[str]:
        messages = extraction_messages(pair, self._max_claims)
        claims = self._client.complete(messages, "claims", CLAIMS_SCHEMA, parse_claims)
        if len(claims) > self._max_claims:
            self._metrics.claims_cut(len(claims) - self._max_claims)
        return claims[: self._max_claims]

    def _verdicts(self, pair: JudgePair, claims: list[str]) -> list[bool]:
        messages = verification_messages(pair, claims)
        count = len(claims)
        return self._client.complete(
            messages, "verdicts", VERDICTS_SCHEMA, lambda reply: parse_verdicts(reply, count)
        )


def load_llm_judge(
    config: FaithfulnessConfig,
    *,
    registry: SidecarRegistry | None,
    on_stats: Callable[[WorkerStats], None],
    stopping: threading.Event,
    on_cost: Callable[[float], None] | None = None,
) -> LlmJudge:
    """The judge of ``config.llm_judge``; ``JudgeUnavailable`` when its key is not set.
    ``on_cost`` hears each USD amount ``rag_judge_cost_usd_total`` adds (a cascade's
    budget)."""
    llm = config.llm_judge
    # The config requires both with this judge.
    assert llm.endpoint is not None
    assert llm.model is not None
    api_key = None
    if llm.api_key_env is not None:
        api_key = os.environ.get(llm.api_key_env)
        if not api_key:
            raise JudgeUnavailable(
                "faithfulness_judge_key_missing",
                f"set the environment variable {llm.api_key_env} to the API key "
                "(detectors.faithfulness.llm_judge.api_key_env names it)",
            )
    name = judge_identity(config)
    prices = llm.prices()
    metrics = JudgeMetrics(registry, name, prices, on_cost)
    client = ChatClient(
        llm.endpoint,
        llm.model,
        api_key=api_key,
        timeout_s=llm.timeout_s,
        max_retries=llm.max_retries,
        on_attempt=metrics.attempt,
        wait=stopping.wait,
        max_tokens=llm.max_output_tokens,
    )
    log.info(
        "faithfulness_judge_ready",
        judge=name,
        concurrency=llm.concurrency,
        priced=prices is not None,
    )
    return LlmJudge(
        llm,
        name=name,
        client=client,
        metrics=metrics,
        cache_size=config.cache_size,
        on_stats=on_stats,
    )
