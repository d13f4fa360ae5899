"""Pair halves, late signals and pair outcomes, their JSON records, and the paired deltas.

A half is what one replica keeps of a trace that carries ``rag.pair_id``: ids, numbers and
a hash of the normalised answer, never production text unless review text storage is on
(``query`` and ``answer`` stay None otherwise). The same records travel on Kafka and sit in
the pair store, so one reader serves both.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from monitor.contract.trace import STAGES, RagTrace
from monitor.contract.variants import PRODUCTION, variant_of

HALF_SCHEMA = "rag-shadow-half/1"
SIGNAL_SCHEMA = "rag-shadow-signal/1"
PAIR_SCHEMA = "rag-shadow-pair/1"
MAX_INTENT_LENGTH = 64

SignalKind = Literal["faithfulness", "false_exclusion"]
SIGNAL_KINDS: tuple[SignalKind, ...] = get_args(SignalKind)
# joined: both halves met; the others are halves whose twin never came (timed_out: within
# pair_ttl_s, evicted: over max_pending, stopped: the replica stopped first) or came twice.
Outcome = Literal["joined", "timed_out", "evicted", "stopped", "duplicate"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
# What a paired delta is computed for; a pair lacking either side's value is unscorable.
Metric = Literal[
    "latency_embed",
    "latency_retrieve",
    "latency_rerank",
    "latency_generate",
    "latency_ttft",
    "latency_total",
    "cost_usd",
    "faithfulness",
    "retrieval_overlap",
    "answer_changed",
    "false_exclusion",
]
METRICS: tuple[Metric, ...] = get_args(Metric)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class PairHalf:
    """One side of a pair: the numbers the deltas need, no text unless text storage is on."""

    trace_id: str
    pair_id: str
    variant: str
    time: float  # Unix seconds of the request
    intent: str | None = None
    stages: Mapping[str, float] = field(default_factory=dict)
    cost_usd: float | None = None
    retrieved: tuple[str, ...] = ()
    answer_hash: str | None = None
    faithfulness: float | None = None  # a judge's score, when one came (late signal)
    excluded: bool | None = None  # the false-exclusion decision, when one came (late signal)
    query: str | None = None  # only with review text storage on
    answer: str | None = None  # only with review text storage on

    @property
    def production(self) -> bool:
        return self.variant == PRODUCTION


@dataclass(frozen=True, slots=True)
class Signal:
    """A late value for one half: a faithfulness score or a false-exclusion decision."""

    pair_id: str
    trace_id: str
    kind: SignalKind
    value: float  # the score, or 1.0 (excluded) / 0.0 (kept)


@dataclass(frozen=True, slots=True)
class PairOutcome:
    """What became of a pair id's halves: both joined, or one left alone."""

    outcome: Outcome
    pair_id: str
    at: float  # Unix seconds of the decision
    production: PairHalf | None = None
    shadow: PairHalf | None = None

    @property
    def key(self) -> str:
        """The same on every replica reading it back: the store keeps one row per key."""
        ids = (h.trace_id if h else "" for h in (self.production, self.shadow))
        return ":".join((self.outcome, self.pair_id, *ids))

    @property
    def half(self) -> PairHalf:
        """The one half of an unmatched outcome (the production one of a joined pair)."""
        half = self.production or self.shadow
        assert half is not None
        return half

    def both(self) -> tuple[PairHalf, PairHalf]:
        """The production and the shadow half of a joined pair."""
        if self.production is None or self.shadow is None:
            raise ValueError(f"a {self.outcome} outcome has one half")
        return self.production, self.shadow

    @property
    def variant(self) -> str:
        """The compared variant: the shadow's, or the lone half's."""
        return (self.shadow or self.half).variant


def answer_hash(answer: str | None) -> str | None:
    """A hash of the answer with case and whitespace normalised; None without an answer
    (None or empty, as everywhere: no answer to compare)."""
    if not answer:
        return None
    normalised = _SPACE.sub(" ", answer.casefold()).strip()
    return hashlib.blake2b(normalised.encode(), digest_size=16).hexdigest()


def half_of(trace: RagTrace, *, keep_text: bool) -> PairHalf:
    """The half of a trace with a pair id (the variant as the pipeline folded it)."""
    assert trace.pair_id is not None
    return PairHalf(
        trace_id=trace.trace_id,
        pair_id=trace.pair_id,
        variant=variant_of(trace),
        time=trace.time.timestamp(),
        intent=trace.intent[:MAX_INTENT_LENGTH] if trace.intent else None,
        stages=dict(trace.stages),
        cost_usd=trace.cost_usd,
        retrieved=trace.retrieved,
        answer_hash=answer_hash(trace.answer),
        query=trace.query if keep_text else None,
        answer=trace.answer if keep_text else None,
    )


# --- records ------------------------------------------------------------------------------


def half_record(half: PairHalf) -> dict[str, Any]:
    return {"schema": HALF_SCHEMA, **asdict(half), "stages": dict(half.stages)}


def half_from_record(record: Mapping[str, Any]) -> PairHalf:
    """A half from its JSON record; ``ValueError``/``KeyError``/``TypeError`` when malformed."""
    if not isinstance(record, Mapping):
        raise TypeError("a shadow half is a JSON object")
    stages = {str(k): float(v) for k, v in dict(record.get("stages") or {}).items()}
    excluded = record.get("excluded")
    return PairHalf(
        trace_id=str(record["trace_id"]),
        pair_id=str(record["pair_id"]),
        variant=str(record["variant"]),
        time=float(record["time"]),
        intent=_optional_str(record.get("intent")),
        stages={k: v for k, v in stages.items() if k in STAGES},
        cost_usd=_optional_float(record.get("cost_usd")),
        retrieved=tuple(str(d) for d in record.get("retrieved") or ()),
        answer_hash=_optional_str(record.get("answer_hash")),
        faithfulness=_optional_float(record.get("faithfulness")),
        excluded=None if excluded is None else bool(excluded),
        query=_optional_str(record.get("query")),
        answer=_optional_str(record.get("answer")),
    )


def signal_record(signal: Signal) -> dict[str, Any]:
    return {"schema": SIGNAL_SCHEMA, **asdict(signal)}


def message_from_record(record: Any) -> PairHalf | Signal:
    """A halves-topic record: a half or a signal; ``ValueError`` (or ``KeyError``,
    ``TypeError``) for anything else a topic may hold."""
    if not isinstance(record, Mapping):
        raise TypeError("a shadow record is a JSON object")
    if record.get("schema") == SIGNAL_SCHEMA:
        kind = record["kind"]
        if kind not in SIGNAL_KINDS:
            raise ValueError(f"unknown signal kind {kind!r}")
        return Signal(str(record["pair_id"]), str(record["trace_id"]), kind, float(record["value"]))
    if record.get("schema") != HALF_SCHEMA:
        raise ValueError("not a shadow half or signal record")
    return half_from_record(record)


def outcome_record(outcome: PairOutcome) -> dict[str, Any]:
    def half(value: PairHalf | None) -> dict[str, Any] | None:
        return None if value is None else half_record(value)

    return {
        "schema": PAIR_SCHEMA,
        "outcome": outcome.outcome,
        "pair_id": outcome.pair_id,
        "at": outcome.at,
        "production": half(outcome.production),
        "shadow": half(outcome.shadow),
    }


def outcome_from_record(record: Any) -> PairOutcome:
    """A pairs-topic record; ``ValueError``, ``KeyError`` or ``TypeError`` when malformed."""
    if not isinstance(record, Mapping):
        raise TypeError("a shadow record is a JSON object")
    if record.get("schema") != PAIR_SCHEMA or record.get("outcome") not in OUTCOMES:
        raise ValueError("not a shadow pair record")
    production, shadow = record.get("production"), record.get("shadow")
    if production is None and shadow is None:
        raise ValueError("a pair record without a half")
    return PairOutcome(
        outcome=record["outcome"],
        pair_id=str(record["pair_id"]),
        at=float(record["at"]),
        production=None if production is None else half_from_record(production),
        shadow=None if shadow is None else half_from_record(shadow),
    )


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


# --- paired deltas ------------------------------------------------------------------------


def paired_deltas(production: PairHalf, shadow: PairHalf) -> dict[Metric, float | None]:
    """Shadow minus production per metric (retrieval_overlap: the Jaccard overlap;
    answer_changed: 1 or 0); None where either side lacks the value, never a value
    computed from a missing one."""
    deltas: dict[Metric, float | None] = {}
    for stage in STAGES:
        key: Metric = f"latency_{stage}"  # type: ignore[assignment]
        deltas[key] = _difference(shadow.stages.get(stage), production.stages.get(stage))
    deltas["cost_usd"] = _difference(shadow.cost_usd, production.cost_usd)
    deltas["faithfulness"] = _difference(shadow.faithfulness, production.faithfulness)
    # A twin without retrieved ids shows no retrieval to compare (its retriever returned
    # nothing, or the mapping found no documents): unscorable, never an overlap of 0.
    deltas["retrieval_overlap"] = (
        _jaccard(set(production.retrieved), set(shadow.retrieved))
        if production.retrieved and shadow.retrieved
        else None
    )
    hashes = (production.answer_hash, shadow.answer_hash)
    deltas["answer_changed"] = None if None in hashes else float(hashes[0] != hashes[1])
    excluded = (shadow.excluded, production.excluded)
    deltas["false_exclusion"] = (
        None if None in excluded else float(bool(excluded[0])) - float(bool(excluded[1]))
    )
    return deltas


def _jaccard(first: set[str], second: set[str]) -> float:
    return len(first & second) / len(first | second)


def _difference(shadow: float | None, production: float | None) -> float | None:
    return None if shadow is None or production is None else shadow - production
