"""Which answers go to human review: the strata of the method's Part 10.

- ``random``: a trace-id hash under ``random_rate`` (the same pick on every replica);
- ``low_faithfulness``: an HHEM score (a ``JudgeScore`` event) under its threshold;
- ``thumbs_down``: thumbs-down feedback, oversampled at its own rate;
- ``follow_up``: the next query of the same session matches a pattern ("are you sure"):
  the *previous* answer is queued;
- ``weekly_reading``: ``weekly_reading`` answers a week, spread over its hours.

Later evidence needs the trace's text, so recent candidates (traces with a query and an
answer; a trace lacking one is counted as a missing input and never queued: a reviewer
would have nothing to judge) are held in a bounded buffer; evidence for a trace that left
it is counted ``expired``. Every stratum but weekly_reading is bounded per hour, and the
bound is spent evenly over the hour: a token bucket of ``max_per_hour / 3600`` a second
that saves at most ``BURST_S`` of it. A count per clock hour would take the first
``max_per_hour`` candidates of each hour once traffic passes the bound, so the random
stratum would come from the hour's first minutes only (and the other strata would miss
whatever happens later in the hour). What is taken goes to ``sink`` (the detector's worker:
the store, Kafka) as an action; ``sink`` never waits.

An item also carries the outcomes of the evaluations compared with review (``rules``:
``detectors.evaluations`` entries with ``compare_with_review``): results inside the
trace, and results sent later naming the trace id, while the trace is held or queued here.
"""

from __future__ import annotations

import heapq
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from detectors.review.config import ReviewConfig
from detectors.review.metrics import ReviewMetrics
from detectors.review.model import (
    EvaluationOutcome,
    ReviewContext,
    ReviewItem,
    Stratum,
    with_evaluation,
)
from monitor.contract.sampler import TokenBucket, trace_fraction
from monitor.contract.shared import PassRules
from monitor.contract.slicing import Slicer
from monitor.contract.trace import (
    EvaluationResult,
    Event,
    Feedback,
    JudgeScore,
    RagTrace,
    Spans,
    TierVerdict,
)

HOUR_S = 3600.0
WEEK_S = 7 * 24 * HOUR_S
HOURS_PER_WEEK = 168
# What a stratum saves of its hourly bound at most: five minutes of it, so that a clump of
# evidence (an incident's thumbs-downs) gets a few items at once, never the hour's share.
BURST_S = 300.0
_Value = TypeVar("_Value")


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Queue ``item`` (its ``strata`` name the stratum that took it)."""

    item: ReviewItem


@dataclass(frozen=True, slots=True)
class AttachScore:
    """A judge's score for a queued item."""

    trace_id: str
    score: float
    threshold: float
    judge: str = "hhem"
    spans: Spans = ()
    tiers: tuple[TierVerdict, ...] = ()


@dataclass(frozen=True, slots=True)
class AttachFeedback:
    """A feedback kind seen for a queued item."""

    trace_id: str
    kind: str


@dataclass(frozen=True, slots=True)
class AttachEvaluation:
    """An evaluation's outcome for a queued item."""

    trace_id: str
    name: str
    outcome: EvaluationOutcome


Action = Enqueue | AttachScore | AttachFeedback | AttachEvaluation


def judged(result: EvaluationResult, rules: PassRules) -> tuple[str, EvaluationOutcome] | None:
    """``(name, outcome)`` of a result of an evaluation compared with review; None for any
    other evaluation, or a result its rule cannot judge."""
    passes = rules.get(result.name) if result.name else None
    verdict = None if passes is None else passes(result)
    if result.name is None or verdict is None:
        return None
    return result.name, "pass" if verdict else "fail"


def item_of(
    trace: RagTrace, rules: PassRules | None = None, slicer: Slicer | None = None
) -> ReviewItem | None:
    """The review item of a trace, with the outcomes of its results of evaluations in
    ``rules`` and its slices; None when it has no query or no answer to review."""
    if not trace.query or not trace.answer:
        return None
    item = ReviewItem(
        trace_id=trace.trace_id,
        time=trace.time.timestamp(),
        query=trace.query,
        answer=trace.answer,
        contexts=tuple(ReviewContext(c.doc_id, c.chunk_id, c.text) for c in trace.contexts),
        tenant=trace.tenant,
        session_id=trace.session_id,
        slices=slicer.of(trace) if slicer is not None else (),
    )
    for result in trace.evaluations:
        found = judged(result, rules or {})
        if found is not None:
            item = with_evaluation(item, *found)
    return item


def stratum_fraction(stratum: Stratum, trace_id: str) -> float:
    """A stable number in [0, 1) per stratum and trace: independent picks per stratum."""
    return trace_fraction(f"{stratum}:{trace_id}")


def _hold(held: OrderedDict[str, _Value], key: str, value: _Value, bound: int) -> None:
    """Put ``key`` last in ``held``, forgetting the oldest keys beyond ``bound``."""
    held[key] = value
    held.move_to_end(key)
    while len(held) > bound:
        held.popitem(last=False)


class WeeklyReading:
    """``per_week`` random answers a week, spread over its 168 hours.

    By the end of hour ``h`` of a week, ``per_week * (h + 1) // 168`` answers are due.
    Within an hour the candidates with the smallest hashes are held (as many as are due
    and not yet taken); when the hour ends they are released. An hour without traffic
    passes its share to the next hours of the same week.
    """

    def __init__(self, per_week: int) -> None:
        self._per_week = per_week
        self._slot: tuple[int, int] | None = None  # (week, hour of the week)
        self._taken = 0  # released in the current week
        self._held: list[tuple[float, str, ReviewItem]] = []  # max-heap by -fraction

    def offer(self, item: ReviewItem, now: float) -> list[ReviewItem]:
        """Consider ``item``; returns the picks of an hour that has ended."""
        released = self.due(now)
        allowance = self._due_by(self._slot[1] if self._slot else 0) - self._taken
        if allowance <= 0:
            return released
        fraction = stratum_fraction("weekly_reading", item.trace_id)
        entry = (-fraction, item.trace_id, item)
        if len(self._held) < allowance:
            heapq.heappush(self._held, entry)
        elif -self._held[0][0] > fraction:
            heapq.heapreplace(self._held, entry)
        return released

    def due(self, now: float) -> list[ReviewItem]:
        """The picks of the hour that ended before ``now``, if one did."""
        slot = (int(now // WEEK_S), int(now % WEEK_S // HOUR_S))
        if slot == self._slot:
            return []
        released = [item for _, _, item in sorted(self._held, reverse=True)]
        self._held = []
        self._taken += len(released)
        if self._slot is None or slot[0] != self._slot[0]:
            self._taken = 0
        self._slot = slot
        return released

    def _due_by(self, hour: int) -> int:
        return self._per_week * (hour + 1) // HOURS_PER_WEEK


class ReviewSampler:
    """Selects traces into the review queue; called on the pipeline thread (``tick`` from
    the detector's worker, hence the lock)."""

    def __init__(
        self,
        config: ReviewConfig,
        metrics: ReviewMetrics,
        sink: Callable[[Action], bool],
        clock: Callable[[], float] = time.time,
        rules: PassRules | None = None,
        *,
        slicer: Slicer | None = None,
    ) -> None:
        self._config = config
        self._slicer = slicer
        self._rules: PassRules = rules or {}
        self._metrics = metrics
        self._sink = sink
        self._clock = clock
        self._lock = threading.Lock()
        self._bound = config.buffer_size
        self._patterns = [re.compile(p, re.IGNORECASE) for p in config.follow_up_patterns]
        self._buffer: OrderedDict[str, ReviewItem] = OrderedDict()
        self._last_in_session: OrderedDict[str, str] = OrderedDict()
        self._queued: OrderedDict[str, set[Stratum]] = OrderedDict()
        self._weekly = WeeklyReading(config.weekly_reading)
        self._rates: dict[Stratum, float] = {
            "random": config.random_rate,
            "low_faithfulness": config.low_faithfulness_rate,
            "thumbs_down": config.thumbs_down_rate,
            "follow_up": config.follow_up_rate,
        }
        self._bounds = {
            stratum: TokenBucket.hourly(getattr(config.max_per_hour, stratum), BURST_S, clock)
            for stratum in self._rates
        }

    def observe(self, trace: RagTrace) -> None:
        item = item_of(trace, self._rules, self._slicer)
        if item is None:
            if not trace.query:
                self._metrics.missing.count("query")
            if not trace.answer:
                self._metrics.missing.count("answer")
            return
        with self._lock:
            now = self._clock()
            if trace.session_id:
                previous = self._last_in_session.pop(trace.session_id, None)
                if previous is not None and any(p.search(item.query) for p in self._patterns):
                    self._take(previous, "follow_up")
                _hold(self._last_in_session, trace.session_id, trace.trace_id, self._bound)
            _hold(self._buffer, trace.trace_id, item, self._bound)
            self._take(trace.trace_id, "random")
            if self._config.weekly_reading:
                self._release_weekly(self._weekly.offer(item, now))

    def observe_event(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, JudgeScore):
                self._judged(event)
            elif isinstance(event, Feedback):
                self._feedback(event)
            elif isinstance(event, EvaluationResult):
                self._evaluated(event)

    def tick(self) -> None:
        """Release the weekly picks of an hour that has ended."""
        with self._lock:
            self._release_weekly(self._weekly.due(self._clock()))

    # --- under the lock ------------------------------------------------------------------

    def _judged(self, event: JudgeScore) -> None:
        held = self._buffer.get(event.trace_id)
        if held is not None:
            self._buffer[event.trace_id] = replace(
                held,
                hhem_score=event.score,
                hhem_threshold=event.threshold,
                judge=event.judge,
                spans=event.spans,
                tiers=event.tiers,
            )
        if event.trace_id in self._queued:
            self._sink(
                AttachScore(
                    event.trace_id,
                    event.score,
                    event.threshold,
                    event.judge,
                    event.spans,
                    event.tiers,
                )
            )
        if event.score < event.threshold:
            self._take(event.trace_id, "low_faithfulness")

    def _feedback(self, event: Feedback) -> None:
        held = self._buffer.get(event.trace_id)
        if held is not None and event.kind not in held.feedback:
            self._buffer[event.trace_id] = replace(held, feedback=(*held.feedback, event.kind))
        if event.trace_id in self._queued:
            self._sink(AttachFeedback(event.trace_id, event.kind))
        if event.kind == "thumbs_down":
            self._take(event.trace_id, "thumbs_down")

    def _evaluated(self, event: EvaluationResult) -> None:
        """A result sent apart from its request: joined by trace id to a trace this replica
        holds or queued (a result naming only a response id is not joined here)."""
        found = judged(event, self._rules)
        if found is None or event.trace_id is None:
            return
        held = self._buffer.get(event.trace_id)
        if held is not None:
            self._buffer[event.trace_id] = with_evaluation(held, *found)
        if event.trace_id in self._queued:
            self._sink(AttachEvaluation(event.trace_id, *found))

    def _take(self, trace_id: str, stratum: Stratum) -> None:
        """Queue the trace in ``stratum`` if its hash falls under the stratum's rate and the
        stratum's hourly bound has a token."""
        if stratum_fraction(stratum, trace_id) >= self._rates[stratum]:
            return
        if stratum in self._queued.get(trace_id, ()):
            return
        item = self._buffer.get(trace_id)
        if item is None:
            self._metrics.skipped.labels(stratum, "expired").inc()
            return
        if not self._bounds[stratum].take():
            self._metrics.skipped.labels(stratum, "max_per_hour").inc()
            return
        self._enqueue(item, stratum)

    def _release_weekly(self, items: list[ReviewItem]) -> None:
        for item in items:
            if "weekly_reading" not in self._queued.get(item.trace_id, ()):
                # The buffered copy carries the score and feedback seen since.
                self._enqueue(self._buffer.get(item.trace_id, item), "weekly_reading")

    def _enqueue(self, item: ReviewItem, stratum: Stratum) -> bool:
        if not self._sink(Enqueue(replace(item, strata=(stratum,)))):
            self._metrics.skipped.labels(stratum, "queue_full").inc()
            return False
        self._metrics.sampled.labels(stratum).inc()
        strata = self._queued.pop(item.trace_id, set())
        strata.add(stratum)
        _hold(self._queued, item.trace_id, strata, self._bound)
        return True
