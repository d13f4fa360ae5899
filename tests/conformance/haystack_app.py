"""A realistic Haystack RAG app for the conformance tests: BM25 retrieval, a ranker, a chat LLM.

Run as a script (``python -m tests.conformance.haystack_app OUT.json``) it
writes the spans of three requests as the official OpenInference
instrumentation emits them.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack import Document, Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret

MODEL = "gpt-4o-mini"
TOP_K_RETRIEVE = 4
TOP_K_RANK = 2

# (doc_id, tenant, content); each source document is one chunk "<doc_id>#0".
CORPUS: tuple[tuple[str, str, str], ...] = (
    ("doc-1", "acme", "The refund policy allows returns within thirty days of purchase."),
    ("doc-2", "acme", "Shipping to Europe takes five business days with standard delivery."),
    ("doc-3", "globex", "Premium support is available around the clock for enterprise plans."),
    ("doc-4", "globex", "Passwords must be rotated every ninety days under the security policy."),
    ("doc-5", "initech", "The warranty covers hardware defects for two years after delivery."),
    ("doc-6", "initech", "Invoices are issued on the first business day of every month."),
    ("doc-7", "umbrella", "Data is encrypted at rest with AES-256 and in transit with TLS."),
    ("doc-8", "umbrella", "The API rate limit is one hundred requests per minute per key."),
)

TEMPLATE = [
    ChatMessage.from_system("Answer only from the context below."),
    ChatMessage.from_user(
        "Context:\n{% for document in documents %}- {{ document.content }}\n{% endfor %}"
        "\nQuestion: {{ question }}"
    ),
]


@component
class OverlapRanker:
    """Reranks by word overlap with the query; like many rankers, it returns the documents without meta."""

    def __init__(self, top_k: int = TOP_K_RANK) -> None:
        self.top_k = top_k

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, documents: list[Document], top_k: int | None = None
    ) -> dict[str, Any]:
        words = set(query.lower().split())
        scored = [
            Document(
                id=doc.id,
                content=doc.content,
                score=len(words & set((doc.content or "").lower().split())) / max(len(words), 1),
            )
            for doc in documents
        ]
        scored.sort(key=lambda doc: doc.score or 0.0, reverse=True)
        return {"documents": scored[: top_k or self.top_k]}


def documents() -> list[Document]:
    return [
        Document(id=f"{doc_id}#0", content=content, meta={"doc_id": doc_id, "tenant": tenant})
        for doc_id, tenant, content in CORPUS
    ]


def build_pipeline(base_url: str) -> Pipeline:
    store = InMemoryDocumentStore()
    store.write_documents(documents())
    pipeline = Pipeline()
    pipeline.add_component(
        "retriever", InMemoryBM25Retriever(document_store=store, top_k=TOP_K_RETRIEVE)
    )
    pipeline.add_component("ranker", OverlapRanker())
    pipeline.add_component(
        "prompt_builder", ChatPromptBuilder(template=TEMPLATE, required_variables="*")
    )
    pipeline.add_component(
        "llm",
        OpenAIChatGenerator(
            model=MODEL, api_base_url=base_url, api_key=Secret.from_token("sk-test")
        ),
    )
    pipeline.connect("retriever.documents", "ranker.documents")
    pipeline.connect("ranker.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "llm.messages")
    return pipeline


def ask(pipeline: Pipeline, question: str, tenant: str) -> str:
    """One request as a user would run it, with the caller's tenant in the OpenInference context."""
    from openinference.instrumentation import using_attributes

    with using_attributes(metadata={"tenant": tenant}):
        result = pipeline.run(
            {
                "retriever": {"query": question},
                "ranker": {"query": question},
                "prompt_builder": {"question": question},
            }
        )
    return result["llm"]["replies"][0].text


def expected_documents(question: str) -> tuple[list[Document], list[Document]]:
    """The retriever's and the ranker's documents for ``question``; call it uninstrumented."""
    store = InMemoryDocumentStore()
    store.write_documents(documents())
    retrieved = InMemoryBM25Retriever(document_store=store, top_k=TOP_K_RETRIEVE).run(
        query=question
    )["documents"]
    ranked = OverlapRanker().run(query=question, documents=retrieved)["documents"]
    return retrieved, ranked


QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What is the refund policy for returns?", "acme"),
    ("How long does shipping to Europe take?", "globex"),
    ("How often must passwords be rotated?", "initech"),
    ("Is data encrypted at rest?", "umbrella"),
    ("What does the warranty cover?", "acme"),
)


def _dump(base_url: str) -> None:
    pipeline = build_pipeline(base_url)
    for question, tenant in QUESTIONS[:3]:
        ask(pipeline, question, tenant)


if __name__ == "__main__":
    from openinference.instrumentation.haystack import HaystackInstrumentor

    from tests.conformance.span_dump import dump_spans

    dump_spans(HaystackInstrumentor(), _dump)
