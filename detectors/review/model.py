"""What the review loop passes around: queued items and reviewers' verdicts.

An item holds production text (query, answer, contexts): it lives only in the review
store (``state_dir/review.sqlite3``) and the optional ``review`` Kafka topic, never in a
log line or a metric label.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from monitor.contract.slicing import Slice
from monitor.contract.trace import Spans, TierVerdict

Stratum = Literal["random", "low_faithfulness", "thumbs_down", "follow_up", "weekly_reading"]
STRATA: tuple[Stratum, ...] = get_args(Stratum)
Supported = Literal["yes", "partly", "no", "no_claim"]
SUPPORTED: tuple[Supported, ...] = get_args(Supported)
Reason = Literal["wrong", "incomplete", "off_topic", "harmful", "slow"]
REASONS: tuple[Reason, ...] = get_args(Reason)
# An evaluation's result on an item, by the pass rule of detectors.evaluations.
EvaluationOutcome = Literal["pass", "fail"]
EVALUATION_OUTCOMES: tuple[EvaluationOutcome, ...] = get_args(EvaluationOutcome)
# Evaluations held per item at most (the config allows 64 names; a record from Kafka may
# come from a replica configured otherwise).
MAX_ITEM_EVALUATIONS = 64


@dataclass(frozen=True, slots=True)
class ReviewContext:
    """One context the answer was generated from, as the reviewer sees it."""

    doc_id: str
    chunk_id: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """One sampled answer. ``strata``, ``hhem_score``, ``evaluations`` and ``feedback`` are
    never shown to the reviewer (the review is blind); they feed the report."""

    trace_id: str
    time: float  # Unix seconds of the request
    query: str
    answer: str
    contexts: tuple[ReviewContext, ...] = ()
    tenant: str | None = None
    session_id: str | None = None
    strata: tuple[Stratum, ...] = ()
    hhem_score: float | None = None  # the judge's score (HHEM's, or another judge's)
    hhem_threshold: float | None = None
    judge: str | None = None  # the judge that gave the score; None: stored before names (HHEM)
    spans: Spans = ()  # the answer's parts the judge found unsupported (a token-level judge)
    tiers: tuple[TierVerdict, ...] = ()  # a judge cascade's tiers on this answer
    slices: tuple[Slice, ...] = ()  # the request's slices (monitor.contract.slicing), production's
    feedback: tuple[str, ...] = ()  # feedback kinds seen for this trace, e.g. "regenerate"
    # (evaluation name, outcome) of the results of evaluations set compare_with_review,
    # judged by their pass rules on the replica that saw them; one per name.
    evaluations: tuple[tuple[str, EvaluationOutcome], ...] = ()
    queued_at: float = 0.0  # Unix seconds


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reviewer's record for one item."""

    trace_id: str
    supported: Supported
    relevant_doc_ids: tuple[str, ...] = ()
    missing_doc_ids: tuple[str, ...] = ()
    reason: Reason | None = None
    note: str = ""
    reviewer: str | None = None
    reviewed_at: float = 0.0  # Unix seconds


@dataclass(frozen=True, slots=True)
class Progress:
    """Queue counts for the page: per stratum, items queued and reviewed."""

    queued: dict[str, int] = field(default_factory=dict)
    reviewed: dict[str, int] = field(default_factory=dict)


def with_evaluation(item: ReviewItem, name: str, outcome: EvaluationOutcome) -> ReviewItem:
    """``item`` with ``name``'s outcome set (a later result replaces an earlier one; a new
    name beyond ``MAX_ITEM_EVALUATIONS`` is left out)."""
    held = dict(item.evaluations)
    if name not in held and len(held) >= MAX_ITEM_EVALUATIONS:
        return item
    held[name] = outcome
    return replace(item, evaluations=tuple(held.items()))
