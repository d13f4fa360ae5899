"""The golden-set file and the verdict on one labeled query (see ``detector.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from monitor.contract.events import InvalidRecord, parse_labels
from monitor.contract.slicing import Slice, Slicer
from monitor.contract.trace import RagTrace
from monitor.contract.variants import PRODUCTION, variant_of


class GoldenSetError(ValueError):
    """The golden-set file cannot be used; the message names the file and line."""


def load_golden_set(path: Path) -> dict[str, frozenset[str]]:
    """Read ``{"probe_id": ..., "gold_doc_ids": [...]}`` JSON lines; other keys are ignored.

    Blank lines are skipped; a line that is not a probe label, or a probe id
    given twice, fails the whole file (a golden set must be unambiguous).
    """
    key = "detectors.filter_exclusion.golden_set"
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise GoldenSetError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    golden: dict[str, frozenset[str]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{key}: {path}:{number}"
        try:
            labels = parse_labels(line)
        except InvalidRecord as exc:
            raise GoldenSetError(f"{where}: {exc}") from exc
        if len(labels) != 1 or labels[0].probe_id is None:
            raise GoldenSetError(f"{where}: expected one object with probe_id and gold_doc_ids")
        probe_id = labels[0].probe_id
        if probe_id in golden:
            raise GoldenSetError(f"{where}: probe_id {probe_id!r} appears twice")
        golden[probe_id] = frozenset(labels[0].gold_doc_ids)
    return golden


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a trace contributes to scoring: small enough to hold while it waits for gold."""

    trace_id: str
    probe_id: str | None
    retrieved: tuple[str, ...]  # distinct doc ids in rank order, at most max(recall_k)
    relevance_excluded: frozenset[str]
    ineligible: frozenset[str]  # entitlement_excluded plus documents of another tenant
    variant: str = PRODUCTION  # the variant label its outcome counts under
    # False when the trace shows no retrieval that gold can be matched against: neither a
    # retrieved id nor a relevance exclusion (the retriever returned nothing, or the mapping
    # found no documents), or a document whose id the mapping derived from its text.
    retrieval_seen: bool = True
    slices: tuple[Slice, ...] = ()  # production's slices its outcome counts in too

    @classmethod
    def of(
        cls,
        trace: RagTrace,
        depth: int,
        foreign: Iterable[str] | None = None,
        slicer: Slicer | None = None,
    ) -> Evidence:
        """``foreign``: the trace's ``foreign_documents`` when the caller has them already."""
        variant = variant_of(trace)
        # Positional, in the fields' order: keywords cost a part of making one per trace.
        return cls(
            trace.trace_id,
            trace.probe_id,
            tuple(dict.fromkeys(trace.retrieved))[:depth],  # chunks of one document count once
            frozenset(trace.relevance_excluded),
            frozenset(trace.entitlement_excluded).union(
                foreign_documents(trace) if foreign is None else foreign
            ),
            variant,
            bool(trace.retrieved or trace.relevance_excluded)
            and not any(context.id_derived for context in trace.contexts),
            slicer.of(trace) if slicer is not None and variant == PRODUCTION else (),
        )


@dataclass(frozen=True, slots=True)
class QueryScore:
    """The verdict on one labeled query."""

    eligible_gold: frozenset[str]
    excluded_gold: frozenset[str]  # eligible gold removed by a relevance filter
    recall: dict[int, float]  # k -> recall@k; empty without eligible gold

    @property
    def false_exclusion(self) -> bool:
        """Every eligible gold document was removed by a relevance filter."""
        return bool(self.eligible_gold) and self.excluded_gold == self.eligible_gold

    @property
    def excluded_share(self) -> float:
        """Of the eligible gold, the share a relevance filter removed (1: false exclusion)."""
        return len(self.excluded_gold) / len(self.eligible_gold) if self.eligible_gold else 0.0


def score_query(gold: Iterable[str], evidence: Evidence, recall_k: Iterable[int]) -> QueryScore:
    """Score ``evidence`` against ``gold`` minus the caller's ineligible documents."""
    eligible = frozenset(gold) - evidence.ineligible
    if not eligible:
        return QueryScore(eligible, frozenset(), {})
    recall = {
        k: len(eligible.intersection(evidence.retrieved[:k])) / len(eligible) for k in recall_k
    }
    return QueryScore(eligible, eligible & evidence.relevance_excluded, recall)


def foreign_documents(trace: RagTrace) -> Iterator[str]:
    """Contexts whose metadata tenant is known and is not the caller's, each id once."""
    if trace.tenant is None:
        return
    seen: set[str] = set()
    for context in trace.contexts:
        tenant = context.tenant or context.metadata.get("tenant")
        if isinstance(tenant, str) and tenant != trace.tenant and context.doc_id not in seen:
            seen.add(context.doc_id)
            yield context.doc_id
