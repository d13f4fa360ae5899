"""A LlamaIndex RAG app with fake models: splitter, vector index, reranker, LLM.

Nothing here touches the network: the tokenizer is whitespace, the embedding
is a hashed bag of words, the reranker scores word overlap, and the LLM answers
from its prompt. Run as a script (``python -m tests.conformance.llama_index_app
OUT.json``) to write the spans the official instrumentation emits.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import BaseQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle
from openinference.instrumentation import using_attributes

LLM_MODEL = "gpt-4o-mini"
RERANK_MODEL = "rerank-english-v3.0"
TOP_K = 2
RERANK_TOP_N = 2

dispatcher = get_dispatcher(__name__)


_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "how",
        "if",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "what",
        "when",
    ]
)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP_WORDS]


def whitespace_tokenizer(text: str) -> list[str]:
    """Stands in for tiktoken, which would download its BPE files."""
    return text.split()


class HashEmbedding(BaseEmbedding):
    """A normalized hashed bag of words: similar texts get similar vectors."""

    dim: int = 256

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in _words(text):
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)


class FakeOpenAILLM(CustomLLM):
    """Answers from its prompt; reports usage in ``raw`` as OpenAI responses do."""

    _calls: list[tuple[int, int]] = PrivateAttr(default_factory=list)

    def take_calls(self) -> list[tuple[int, int]]:
        """The (prompt, completion) tokens reported since the last call."""
        calls, self._calls = self._calls, []
        return calls

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=LLM_MODEL, context_window=128_000, num_output=256)

    @staticmethod
    def answer_for(prompt: str) -> str:
        query = prompt.rsplit("Query:", 1)[-1].split("Answer:", 1)[0].strip()
        return f"Based on the context, the answer to '{query}' is in the handbook."

    @staticmethod
    def usage_for(prompt: str, answer: str) -> tuple[int, int]:
        return len(prompt.split()), len(answer.split())

    @staticmethod
    def _raw(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {
            "model": LLM_MODEL,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        answer = self.answer_for(prompt)
        usage = self.usage_for(prompt, answer)
        self._calls.append(usage)
        return CompletionResponse(text=answer, raw=self._raw(*usage))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        answer = self.answer_for(prompt)
        pieces = answer.split(" ")
        prompt_tokens, completion_tokens = self.usage_for(prompt, answer)
        self._calls.append((prompt_tokens, completion_tokens))

        def gen() -> Iterator[CompletionResponse]:
            text = ""
            for i, piece in enumerate(pieces):
                delta = piece if i == 0 else " " + piece
                text += delta
                last = i == len(pieces) - 1
                # OpenAI streams usage only in the final chunk (stream_options.include_usage).
                raw = self._raw(prompt_tokens, completion_tokens) if last else {"model": LLM_MODEL}
                yield CompletionResponse(text=text, delta=delta, raw=raw)

        return gen()


class FakeCohereRerank(BaseNodePostprocessor):
    """Scores word overlap; dispatches the rerank events as ``CohereRerank`` does."""

    model: str = RERANK_MODEL
    top_n: int = RERANK_TOP_N
    _inputs: list[list[NodeWithScore]] = PrivateAttr(default_factory=list)

    def take_inputs(self) -> list[list[NodeWithScore]]:
        """The retrieved nodes handed to each call since the last take."""
        inputs, self._inputs = self._inputs, []
        return inputs

    @classmethod
    def class_name(cls) -> str:
        return "FakeCohereRerank"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("Missing query bundle in extra info.")
        self._inputs.append(list(nodes))
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle, nodes=nodes, top_n=self.top_n, model_name=self.model
            )
        )
        query = set(_words(query_bundle.query_str))
        scored = [
            NodeWithScore(
                node=n.node,
                score=len(query & set(_words(n.node.get_content()))) / (len(query) or 1),
            )
            for n in nodes
        ]
        reranked = sorted(scored, key=lambda n: -(n.score or 0.0))[: self.top_n]
        dispatcher.event(ReRankEndEvent(nodes=reranked))
        return reranked


@dataclass(frozen=True)
class Doc:
    doc_id: str
    tenant: str
    text: str


CORPUS: tuple[Doc, ...] = (
    Doc(
        "doc-1",
        "acme",
        "Refund policy. Customers may request a refund within 30 days of purchase. "
        "Refunds are paid to the original payment method within five business days. "
        "Digital goods are refundable only if they were never downloaded.",
    ),
    Doc(
        "doc-2",
        "acme",
        "Shipping. Standard shipping takes three to five business days. "
        "Express shipping arrives the next business day when ordered before noon. "
        "International shipping is available to forty countries.",
    ),
    Doc(
        "doc-3",
        "globex",
        "Password reset. Open the login page and choose forgot password. "
        "A reset link is emailed and expires after one hour. "
        "Accounts lock after five failed login attempts.",
    ),
    Doc(
        "doc-4",
        "globex",
        "Billing. Invoices are issued on the first day of each month. "
        "Payment is due within fourteen days. Late payments incur a two percent fee.",
    ),
    Doc(
        "doc-5",
        "initech",
        "Support hours. The help desk is open Monday to Friday from nine to six. "
        "Premium customers can call the support line around the clock.",
    ),
)


def configure_settings() -> None:
    """Fake models everywhere LlamaIndex would otherwise load or download one."""
    Settings.tokenizer = whitespace_tokenizer
    Settings.embed_model = HashEmbedding(model_name="hash-embedding-256")
    Settings.llm = FakeOpenAILLM()


def documents() -> list[Document]:
    # The source doc id goes into metadata too: OpenInference exports a node's
    # id (a chunk UUID) and metadata, never its ref_doc_id.
    return [
        Document(
            text=d.text,
            doc_id=d.doc_id,
            metadata={"tenant": d.tenant, "doc_id": d.doc_id},
            excluded_embed_metadata_keys=["tenant", "doc_id"],
            excluded_llm_metadata_keys=["tenant", "doc_id"],
        )
        for d in CORPUS
    ]


@dataclass(frozen=True)
class Answered:
    """What the app saw for one query."""

    question: str
    tenant: str
    streaming: bool
    answer: str
    retrieved: tuple[NodeWithScore, ...]
    source_nodes: tuple[NodeWithScore, ...]
    prompt_tokens: int
    completion_tokens: int


class RagApp:
    """Splitter, vector index, top-k retriever, reranker and LLM, all fake models."""

    def __init__(self) -> None:
        configure_settings()
        self.llm = FakeOpenAILLM()
        self.reranker = FakeCohereRerank()
        splitter = SentenceSplitter(chunk_size=24, chunk_overlap=0)
        self.index = VectorStoreIndex.from_documents(documents(), transformations=[splitter])

    def engine(self, streaming: bool) -> BaseQueryEngine:
        return self.index.as_query_engine(
            llm=self.llm,
            similarity_top_k=TOP_K,
            node_postprocessors=[self.reranker],
            streaming=streaming,
        )

    def ask(self, question: str, tenant: str, streaming: bool = False) -> Answered:
        """Query as ``tenant``; a streamed answer is consumed to the end."""
        with using_attributes(metadata={"tenant": tenant}):
            response = self.engine(streaming).query(question)
            if isinstance(response, StreamingResponse):
                answer = "".join(response.response_gen)
            else:
                assert isinstance(response, Response)
                answer = str(response.response)
        calls = self.llm.take_calls()
        (retrieved,) = self.reranker.take_inputs()
        return Answered(
            question=question,
            tenant=tenant,
            streaming=streaming,
            answer=answer,
            retrieved=tuple(retrieved),
            source_nodes=tuple(response.source_nodes),
            prompt_tokens=sum(p for p, _ in calls),
            completion_tokens=sum(c for _, c in calls),
        )


# (question, caller's tenant, streaming). The two chunks each question retrieves
# come from two different documents, and no retrieval score ties.
QUESTIONS: tuple[tuple[str, str, bool], ...] = (
    ("How long do refunds take to be paid?", "acme", False),
    ("How long is a password reset link valid?", "globex", False),
    ("Can digital goods be refunded?", "initech", False),
    ("When is payment due?", "umbrella", False),
    ("Can premium customers call the support line at night?", "hooli", True),
    ("How do I reset my password?", "stark", True),
)


def _dump(_base_url: str) -> None:
    app = RagApp()
    for question, tenant, streaming in QUESTIONS:
        app.ask(question, tenant, streaming)


if __name__ == "__main__":
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    from tests.conformance.span_dump import dump_spans

    dump_spans(LlamaIndexInstrumentor(), _dump)
