"""What a faithfulness judge is: an object the scoring worker calls with (premise, answer)
pairs, whether that worker runs inline in the sidecar or in a scorer process.

A judge returns one ``JudgeResult`` per pair, in order: a score in [0, 1] (``scored``),
``no_claims`` (the answer states nothing to check), or ``error`` with its kind. An
error is never a score: the worker counts it as the ``error`` outcome and nothing
enters the score histogram or the pass share. A token-level judge adds the answer's
unsupported spans, a cascade each tier's verdict. The judges (``judge:`` in
``detectors.faithfulness``): ``hhem`` (``hhem_judge.py``), ``token_classifier``
(``token_judge.py``), ``openai_compatible`` (``llm_judge.py``) and ``cascade``
(``cascade_judge.py``: a local judge, then the LLM judge on the uncertain band);
``judge_choice.open_judge`` loads the configured one. Each imports this module, so it imports
none of them; the judges' name is ``judge_identity.py``'s, their prompts ``llm_prompts.py``'s.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from monitor.contract.trace import Spans, TierVerdict

if TYPE_CHECKING:
    import threading

    from detectors.faithfulness.config import FaithfulnessConfig
    from monitor.contract.sidecar_registry import SidecarRegistry

# Why a pair has no score. model_error: the local model failed on it; cancelled: the worker
# stopped while the pair was being judged; the rest are the LLM endpoint's answers.
ErrorKind = Literal[
    "model_error",
    "malformed",
    "timeout",
    "rate_limited",
    "server_error",
    "client_error",
    "connection_error",
    "cancelled",
]
JudgeOutcome = Literal["scored", "no_claims", "error"]
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class JudgePair:
    """What a judge reads: the evidence (the contexts' texts), the answer, and the question
    it answered (an LLM judge resolves "it" and "yes" with it; HHEM ignores it)."""

    premise: str
    answer: str
    question: str | None = None


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """A judge's verdict on one pair: a score, no claims, or an error of some kind."""

    outcome: JudgeOutcome
    score: float | None = None
    truncated: bool = False  # the premise was cut to fit the judge
    error: ErrorKind | None = None
    spans: Spans = ()  # a token-level judge's unsupported parts of the answer
    tiers: tuple[TierVerdict, ...] = ()  # a cascade's verdict of each tier that judged

    @classmethod
    def scored(cls, score: float, truncated: bool = False, spans: Spans = ()) -> JudgeResult:
        return cls("scored", score, truncated, spans=spans)

    @classmethod
    def failed(cls, kind: ErrorKind) -> JudgeResult:
        return cls("error", error=kind)


NO_CLAIMS = JudgeResult("no_claims")


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """Judge work done, reported after each batch: pairs the judge itself looked at, the
    seconds it took, and pairs answered from the cache instead."""

    pairs: int
    seconds: float
    cache_hits: int


class Judge(Protocol):
    """A faithfulness judge; thread-confined to the worker that calls it."""

    @property
    def name(self) -> str:
        """Stored with each score (``JudgeScore.judge``): calibration is per judge."""
        ...

    @property
    def batch_size(self) -> int:
        """Pairs the worker hands over at a time."""
        ...

    def score(self, pairs: Sequence[JudgePair]) -> list[JudgeResult]:
        """One result per pair, in order; never raises for a pair it cannot judge."""
        ...

    def close(self) -> None:
        """Release threads or sessions; the judge is not called again."""
        ...


class JudgeOpener(Protocol):
    """``judge_choice.open_judge``'s signature: a cascade is handed it to open its first
    judge, so no judge module imports the module that imports the judges."""

    def __call__(
        self,
        config: FaithfulnessConfig,
        *,
        registry: SidecarRegistry | None,
        on_stats: Callable[[WorkerStats], None],
        stopping: threading.Event,
    ) -> Judge: ...


class JudgeUnavailable(Exception):
    """The judge cannot run here until someone acts (a key to set): the detector reports
    down and logs ``event`` with ``how_to_fix``; the sidecar goes on."""

    def __init__(self, event: str, how_to_fix: str) -> None:
        self.event = event
        self.how_to_fix = how_to_fix
        super().__init__(how_to_fix)


def batch_size_for(config: FaithfulnessConfig) -> int:
    """Pairs per worker batch: HHEM's batch_size (1 on cpu, 8 on cuda by default), or the
    LLM judge's concurrency; a cascade's the larger of its first judge's and its LLM
    judge's, so that one batch's uncertain answers can keep the LLM's requests busy."""
    if config.judge == "openai_compatible":
        return config.llm_judge.concurrency
    if config.judge == "cascade":
        first = batch_size_for(config.model_copy(update={"judge": config.cascade.first}))
        return max(first, config.llm_judge.concurrency)
    return config.batch_size or (1 if config.device.startswith("cpu") else 8)


def pair_key(premise: str, hypothesis: str) -> bytes:
    """A cache key for a pair; the texts themselves are not kept."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(premise.encode("utf-8", "surrogatepass"))
    digest.update(b"\0")
    digest.update(hypothesis.encode("utf-8", "surrogatepass"))
    return digest.digest()


class ScoreCache(Generic[_V]):
    """Least-recently-used values by pair key."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, _V] = OrderedDict()

    def get(self, key: bytes) -> _V | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: bytes, value: _V) -> None:
        if self._size <= 0:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
