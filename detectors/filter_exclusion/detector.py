"""Relevance-filter false exclusions, recall@k against eligible gold, and entitlement leaks.

A hard relevance predicate (locale, product, category) can remove every
relevant document a caller may see while answers still come back fast.
Recall@k against the *original* eligible gold set shows the loss; only the
false-exclusion rate attributes it to the predicate. Gold documents come from
labels (``Label`` events: the labels topic, ``POST /v1/labels``) and from the
golden-set file; they are joined to traces by ``trace_id`` or ``probe_id`` in
either arrival order within ``join_ttl_s``.

Eligibility, from what the trace carries: a gold document is *ineligible* for
the caller when it is in ``entitlement_excluded`` or when the trace shows it
(a context's metadata ``tenant``) belonging to another tenant than the
caller's. Every other gold document is eligible, including one the trace never
mentions or lists only in ``relevance_excluded``: the service's access rules
saw it and did not remove it, so losing it is a relevance loss, not a
correct exclusion.

A labeled query whose trace shows no retrieval to match gold against (no retrieved id
and no relevance exclusion, or a derived document id) is counted as a missing input
(``retrieved_ids``), never scored: recall 0 from an empty input would be a guess.

Entitlement leaks are checked on every trace, labeled or not: a context whose
tenant differs from the caller's is a security alarm.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import structlog

from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.metrics import ExclusionMetrics
from detectors.filter_exclusion.scoring import (
    Evidence,
    foreign_documents,
    load_golden_set,
    score_query,
)
from monitor.contract.detector import InlineDetector
from monitor.contract.missing import MissingInputs
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slicer
from monitor.contract.trace import Event, ExclusionOutcome, Label, RagTrace

log = structlog.get_logger("rag_monitor.filter_exclusion")

NO_EVIDENCE = "no evidence"
# Enough document ids in the entitlement log line to start an investigation.
LOGGED_DOC_IDS = 5


K = TypeVar("K")
V = TypeVar("V")


class ExpiringMap(Generic[K, V]):
    """Insertion-ordered map whose entries expire ``ttl_s`` after their last ``put``.

    Every entry lives as long, so the oldest is always first and expiry pops
    from the front. Beyond ``max_entries`` the oldest is dropped early.
    """

    def __init__(self, ttl_s: float, max_entries: int) -> None:
        self._ttl_s = ttl_s
        self._max = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def pop(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        return None if entry is None else entry[1]

    def put(self, key: K, value: V, now: float) -> list[tuple[K, V]]:
        """Insert or refresh ``key``; returns the entries dropped to stay within the bound."""
        self._entries.pop(key, None)
        self._entries[key] = (now + self._ttl_s, value)
        dropped = []
        while len(self._entries) > self._max:
            old_key, (_, old_value) = self._entries.popitem(last=False)
            dropped.append((old_key, old_value))
        return dropped

    def expire(self, now: float) -> list[tuple[K, V]]:
        expired = []
        while self._entries:
            key, (deadline, value) = next(iter(self._entries.items()))
            if deadline > now:
                break
            del self._entries[key]
            expired.append((key, value))
        return expired


@dataclass(slots=True)
class _ProbeLabel:
    gold: frozenset[str]
    matched: bool = False


@dataclass(frozen=True, slots=True)
class FilterExclusionStatus:
    """Totals since start, for the terminal view and logs (alerts use PromQL over counters)."""

    eligible_queries: int
    false_exclusions: int
    no_eligible_gold: int
    eligible_gold_docs: int
    excluded_gold_docs: int
    entitlement_violations: int

    @property
    def false_exclusion_rate(self) -> float | None:
        """None, never 0, when no labeled query had eligible gold."""
        if not self.eligible_queries:
            return None
        return self.false_exclusions / self.eligible_queries

    def describe(self) -> str:
        rate = self.false_exclusion_rate
        if rate is None:
            return f"{NO_EVIDENCE}: no labeled query with eligible gold yet"
        return (
            f"{self.false_exclusions}/{self.eligible_queries} eligible queries ({rate:.2%}) "
            f"lost every eligible gold document to a relevance filter"
        )


class FilterExclusionDetector(InlineDetector):
    """Joins gold labels to traces and exports the false-exclusion, recall and leak metrics."""

    name: ClassVar[str] = "filter_exclusion"

    def __init__(
        self,
        config: FilterExclusionConfig,
        registry: SidecarRegistry,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[Event], bool] | None = None,
        slicer: Slicer | None = None,
    ) -> None:
        self._slicer = slicer if slicer is not None and slicer.enabled else None
        self._recall_k = tuple(config.recall_k)
        self._depth = max(self._recall_k)  # how many distinct retrieved ids a trace keeps
        self._emit = emit  # each decision, as an ExclusionOutcome for other detectors
        self._clock = clock
        self._golden = load_golden_set(config.golden_set) if config.golden_set else {}
        ttl, bound = config.join_ttl_s, config.max_pending
        self._trace_labels: ExpiringMap[str, frozenset[str]] = ExpiringMap(ttl, bound)
        self._probe_labels: ExpiringMap[str, _ProbeLabel] = ExpiringMap(ttl, bound)
        self._traces: ExpiringMap[str, Evidence] = ExpiringMap(ttl, bound)
        self._traces_by_probe: dict[str, set[str]] = {}
        # Ids of scored traces, so that a label arriving again is not scored twice.
        self._scored: ExpiringMap[str, None] = ExpiringMap(ttl, bound)
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(FilterExclusionStatus.__dataclass_fields__, 0)
        self._metrics = ExclusionMetrics(registry, self._recall_k, slicer or Slicer())
        self._missing = MissingInputs(registry, self.name, ("retrieved_ids",))
        pending = self._metrics.pending
        pending.labels("labels").set_function(
            lambda: len(self._trace_labels) + len(self._probe_labels)
        )
        pending.labels("traces").set_function(lambda: len(self._traces))

    @property
    def golden_set_size(self) -> int:
        return len(self._golden)

    def observe(self, trace: RagTrace) -> None:
        with self._lock:
            # Found once: both the entitlement check and the evidence use them.
            foreign = list(foreign_documents(trace))
            if foreign:
                self._entitlement_violation(trace, foreign)
            now = self._clock()
            self._expire(now)
            if trace.trace_id in self._scored:
                return
            evidence = Evidence.of(trace, self._depth, foreign, self._slicer)
            gold = self._trace_labels.pop(trace.trace_id)
            if gold is None and trace.probe_id is not None:
                gold = self._probe_gold(trace.probe_id)
            if gold is not None:
                self._score(gold, evidence, now)
                return
            self._hold(evidence, now)

    def observe_event(self, event: Event) -> None:
        if not isinstance(event, Label):
            return
        with self._lock:
            now = self._clock()
            self._expire(now)
            gold = frozenset(event.gold_doc_ids)
            if event.trace_id is not None:
                self._label_trace(event.trace_id, gold, now)
            elif event.probe_id is not None:
                self._label_probe(event.probe_id, gold, now)

    def status(self) -> FilterExclusionStatus:
        with self._lock:
            self._expire(self._clock())
            return FilterExclusionStatus(**self._totals)

    def start(self) -> None:
        log.info("filter_exclusion_started", golden_set_probes=len(self._golden))

    # --- entitlement ------------------------------------------------------------------

    def _entitlement_violation(self, trace: RagTrace, foreign: list[str]) -> None:
        self._metrics.violations.inc(len(foreign))
        self._totals["entitlement_violations"] += len(foreign)
        # One line per trace, not per document: a leaking index can put a thousand
        # foreign documents in one request (ids only, never their text).
        log.error(
            "entitlement_violation",
            trace_id=trace.trace_id,
            tenant=trace.tenant,
            foreign_documents=len(foreign),
            doc_ids=foreign[:LOGGED_DOC_IDS],
        )

    # --- the join ---------------------------------------------------------------------

    def _label_trace(self, trace_id: str, gold: frozenset[str], now: float) -> None:
        evidence = self._traces.pop(trace_id)
        if evidence is not None:
            self._unindex(evidence)
            self._score(gold, evidence, now)
        elif trace_id in self._scored or trace_id in self._trace_labels:
            self._metrics.duplicate_labels.inc()  # the first label of a trace wins
        else:
            for _ in self._trace_labels.put(trace_id, gold, now):
                self._metrics.unmatched_labels.inc()

    def _label_probe(self, probe_id: str, gold: frozenset[str], now: float) -> None:
        # A probe label applies to every replay of the probe within the TTL; a
        # newer one for the same probe replaces it (a corrected golden set).
        label = _ProbeLabel(gold)
        waiting = self._traces_by_probe.pop(probe_id, set())
        for trace_id in waiting:
            evidence = self._traces.pop(trace_id)
            if evidence is not None:
                label.matched = True
                self._score(gold, evidence, now)
        previous = self._probe_labels.get(probe_id)
        if previous is not None and previous.matched:
            label.matched = True
        for _, dropped in self._probe_labels.put(probe_id, label, now):
            if not dropped.matched:
                self._metrics.unmatched_labels.inc()

    def _probe_gold(self, probe_id: str) -> frozenset[str] | None:
        label = self._probe_labels.get(probe_id)
        if label is not None:
            label.matched = True
            return label.gold
        return self._golden.get(probe_id)

    def _hold(self, evidence: Evidence, now: float) -> None:
        if evidence.probe_id is not None:
            self._traces_by_probe.setdefault(evidence.probe_id, set()).add(evidence.trace_id)
        for _, dropped in self._traces.put(evidence.trace_id, evidence, now):
            self._drop_trace(dropped)

    def _drop_trace(self, evidence: Evidence) -> None:
        # Unlabeled live traffic is the normal case; only a probe without gold is a gap.
        if evidence.probe_id is not None:
            self._unindex(evidence)
            self._metrics.unmatched_probe_traces.inc()

    def _unindex(self, evidence: Evidence) -> None:
        if evidence.probe_id is None:
            return
        waiting = self._traces_by_probe.get(evidence.probe_id)
        if waiting is not None:
            waiting.discard(evidence.trace_id)
            if not waiting:
                del self._traces_by_probe[evidence.probe_id]

    def _expire(self, now: float) -> None:
        for _ in self._trace_labels.expire(now):
            self._metrics.unmatched_labels.inc()
        for _, label in self._probe_labels.expire(now):
            if not label.matched:
                self._metrics.unmatched_labels.inc()
        for _, evidence in self._traces.expire(now):
            self._drop_trace(evidence)
        self._scored.expire(now)

    # --- scoring ----------------------------------------------------------------------

    def _score(self, gold: frozenset[str], evidence: Evidence, now: float) -> None:
        self._scored.put(evidence.trace_id, None, now)
        score = score_query(gold, evidence, self._recall_k)
        metrics, totals = self._metrics, self._totals
        if not score.eligible_gold:
            metrics.no_eligible_gold.inc()
            totals["no_eligible_gold"] += 1
            return
        if not evidence.retrieval_seen:
            self._missing.count("retrieved_ids")
            return
        metrics.eligible_queries[evidence.variant].inc()
        metrics.slice_queries.inc(evidence.slices)
        # Counted at 0 too: a slice without a false exclusion records a rate of 0.
        metrics.slice_false_exclusions.inc(evidence.slices, amount=float(score.false_exclusion))
        metrics.eligible_gold_docs.inc(len(score.eligible_gold))
        metrics.excluded_gold_docs.inc(len(score.excluded_gold))
        totals["eligible_queries"] += 1
        totals["eligible_gold_docs"] += len(score.eligible_gold)
        totals["excluded_gold_docs"] += len(score.excluded_gold)
        if score.false_exclusion:
            metrics.false_exclusions[evidence.variant].inc()
            totals["false_exclusions"] += 1
        if self._emit is not None:
            share = score.excluded_share
            self._emit(ExclusionOutcome(evidence.trace_id, score.false_exclusion, share))
        for k, recall in score.recall.items():
            metrics.recall[k].observe(recall)
