"""The one contract between collectors and detectors: ``RagTrace`` and the events.

Collectors own parsing and validation; everything here is already typed and
bounded, so detectors can trust it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, get_args

Stage = Literal["embed", "retrieve", "rerank", "generate", "ttft", "total"]
STAGES: tuple[Stage, ...] = get_args(Stage)
Source = Literal["otlp", "kafka", "phoenix"]
FeedbackKind = Literal["thumbs_up", "thumbs_down", "regenerate", "copy"]


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Context:
    """A chunk supplied to the generator."""

    doc_id: str
    chunk_id: str | None = None
    text: str | None = None
    score: float | None = None
    tenant: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens (and rerank units) one model used for the request."""

    model: str
    provider: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_tokens: int = 0
    rerank_units: int = 0


@dataclass(frozen=True, slots=True)
class RagTrace:
    """One normalized RAG request (DESIGN.md "The RagTrace record")."""

    trace_id: str
    time: datetime
    source: Source
    root_span_id: str | None = None
    tenant: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    intent: str | None = None
    query: str | None = None
    answer: str | None = None
    contexts: tuple[Context, ...] = ()
    retrieved: tuple[str, ...] = ()
    relevance_excluded: tuple[str, ...] = ()
    entitlement_excluded: tuple[str, ...] = ()
    filter_predicate: str | None = None
    stages: Mapping[str, float] = field(default_factory=_empty)
    usage: tuple[Usage, ...] = ()
    cost_usd: float | None = None
    query_embedding: tuple[float, ...] | None = None
    probe_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class Label:
    """Gold documents for a trace (by ``trace_id``) or a golden-set probe (by ``probe_id``)."""

    gold_doc_ids: tuple[str, ...]
    trace_id: str | None = None
    probe_id: str | None = None


@dataclass(frozen=True, slots=True)
class Feedback:
    """A user's reaction to an answer."""

    trace_id: str
    kind: FeedbackKind
    reason: str | None = None
    session_id: str | None = None


Event = Label | Feedback
