"""A hand-written RAG app on the plain ``openai`` client, as a team without a framework writes one.

At start-up it embeds its corpus in one call; per request it embeds the
question, ranks the tenant's documents by cosine similarity in app code (in a
retriever span it writes by hand with the OpenInference attributes), and asks
the chat model with the retrieved context in the system prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from openai import OpenAI
from opentelemetry.trace import Tracer

CHAT_MODEL = "gpt-4o-mini"
EMBEDDING_MODEL = "text-embedding-3-small"


@dataclass(frozen=True)
class Doc:
    """One chunk of the corpus, owned by one tenant."""

    doc_id: str
    tenant: str
    text: str


CORPUS: tuple[Doc, ...] = (
    Doc("acme-refunds", "acme", "Refunds are issued within 14 days of a return being received."),
    Doc("acme-shipping", "acme", "Standard shipping takes three to five business days."),
    Doc("acme-warranty", "acme", "Every device carries a two year limited warranty."),
    Doc("globex-sso", "globex", "Single sign-on is configured under Settings then Security."),
    Doc("globex-billing", "globex", "Invoices are emailed on the first business day of a month."),
    Doc("globex-api", "globex", "API keys can be rotated at any time from the developer console."),
    Doc("initech-vpn", "initech", "Connect to the VPN before opening the internal wiki."),
    Doc("initech-leave", "initech", "Annual leave requests need approval from your manager."),
    Doc("umbrella-lab", "umbrella", "Lab access badges are renewed every six months."),
    Doc("umbrella-safety", "umbrella", "Safety training is mandatory before entering the lab."),
)


@dataclass(frozen=True)
class Answer:
    """What the app got back, and the trace id it logs with it."""

    text: str
    trace_id: str


@dataclass(frozen=True)
class Hit:
    """A retrieved document with its similarity score."""

    doc: Doc
    score: float


def cosine(left: Sequence[float], right: Sequence[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    norm = math.sqrt(sum(a * a for a in left)) * math.sqrt(sum(b * b for b in right))
    return dot / norm if norm else 0.0


class RagApp:
    """The app: ``index()`` once at start-up, then ``answer()`` per request."""

    def __init__(
        self, client: OpenAI, tracer: Tracer, corpus: Sequence[Doc] = CORPUS, top_k: int = 2
    ) -> None:
        self.client = client
        self.tracer = tracer
        self.corpus = tuple(corpus)
        self.top_k = top_k
        self.vectors: list[list[float]] = []

    def index(self) -> None:
        """Embed the whole corpus in one call (outside any request)."""
        result = self.client.embeddings.create(
            model=EMBEDDING_MODEL, input=[doc.text for doc in self.corpus]
        )
        self.vectors = [item.embedding for item in result.data]

    def answer(self, question: str, tenant: str, *, stream: bool = False) -> Answer:
        """Answer ``question`` for ``tenant`` with the text the app received."""
        with self.tracer.start_as_current_span("answer_question") as root:
            root.set_attribute("rag.tenant", tenant)
            trace_id = format(root.get_span_context().trace_id, "032x")
            query_vector = (
                self.client.embeddings.create(model=EMBEDDING_MODEL, input=question)
                .data[0]
                .embedding
            )
            hits = self.retrieve(query_vector, tenant)
            context = "\n\n".join(f"[{hit.doc.doc_id}] {hit.doc.text}" for hit in hits)
            messages = [
                {
                    "role": "system",
                    "content": "Answer only from the context below.\n\nContext:\n" + context,
                },
                {"role": "user", "content": question},
            ]
            if not stream:
                completion = self.client.chat.completions.create(
                    model=CHAT_MODEL,
                    messages=messages,  # type: ignore[arg-type]
                )
                return Answer(completion.choices[0].message.content or "", trace_id)
            chunks = self.client.chat.completions.create(
                model=CHAT_MODEL,
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            text = "".join(
                chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices
            )
            return Answer(text, trace_id)

    def retrieve(self, query_vector: Sequence[float], tenant: str) -> list[Hit]:
        """Rank the tenant's documents by cosine similarity, in a hand-written retriever span."""
        with self.tracer.start_as_current_span("retrieve") as span:
            ranked = sorted(
                (
                    Hit(doc, cosine(query_vector, vector))
                    for doc, vector in zip(self.corpus, self.vectors, strict=True)
                    if doc.tenant == tenant
                ),
                key=lambda hit: hit.score,
                reverse=True,
            )[: self.top_k]
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            for index, hit in enumerate(ranked):
                prefix = f"retrieval.documents.{index}.document"
                span.set_attribute(f"{prefix}.id", hit.doc.doc_id)
                span.set_attribute(f"{prefix}.content", hit.doc.text)
                span.set_attribute(f"{prefix}.score", hit.score)
                span.set_attribute(
                    f"{prefix}.metadata",
                    json.dumps({"doc_id": hit.doc.doc_id, "tenant": hit.doc.tenant}),
                )
            return ranked
