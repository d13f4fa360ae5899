"""A realistic LangChain RAG app for the conformance tests: a keyword retriever, a prompt, ChatOpenAI.

The chain is plain LCEL:
``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | parser``.
Run as a script (``python -m tests.conformance.langchain_app OUT.json``) it
writes the spans of three requests (two ``invoke``, one ``stream``) as the
official OpenInference instrumentation emits them.
"""

from __future__ import annotations

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_openai import ChatOpenAI

MODEL = "gpt-4o-mini"
TOP_K = 3

# (chunk_id, doc_id, tenant, content): several chunks per source document.
CORPUS: tuple[tuple[str, str, str, str], ...] = (
    (
        "doc-1#0",
        "doc-1",
        "acme",
        "The refund policy allows returns within thirty days of purchase.",
    ),
    ("doc-1#1", "doc-1", "acme", "Refunds are paid back to the original payment method."),
    (
        "doc-2#0",
        "doc-2",
        "acme",
        "Shipping to Europe takes five business days with standard delivery.",
    ),
    (
        "doc-3#0",
        "doc-3",
        "globex",
        "Premium support is available around the clock for enterprise plans.",
    ),
    (
        "doc-4#3",
        "doc-4",
        "globex",
        "Passwords must be rotated every ninety days under the security policy.",
    ),
    (
        "doc-5#0",
        "doc-5",
        "initech",
        "The warranty covers hardware defects for two years after delivery.",
    ),
    (
        "doc-6#1",
        "doc-6",
        "initech",
        "Invoices are issued on the first business day of every month.",
    ),
    (
        "doc-7#2",
        "doc-7",
        "umbrella",
        "Data is encrypted at rest with AES-256 and in transit with TLS.",
    ),
    (
        "doc-8#0",
        "doc-8",
        "umbrella",
        "The API rate limit is one hundred requests per minute per key.",
    ),
)

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer only from the context below.\n\nContext:\n{context}"),
        ("human", "{question}"),
    ]
)


def chunks() -> list[Document]:
    return [
        Document(
            id=chunk_id,
            page_content=content,
            metadata={"doc_id": doc_id, "tenant": tenant, "source": f"{doc_id}.md"},
        )
        for chunk_id, doc_id, tenant, content in CORPUS
    ]


def _words(text: str) -> set[str]:
    return {word.strip("?.,!").lower() for word in text.split()}


class KeywordRetriever(BaseRetriever):
    """Top-k chunks by word overlap with the query, ties in corpus order."""

    documents: list[Document]
    k: int = TOP_K

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        words = _words(query)
        scored = [(len(words & _words(doc.page_content)), doc) for doc in self.documents]
        ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: -item[0])
        return [doc for _, doc in ranked[: self.k]]


def format_docs(documents: list[Document]) -> str:
    return "\n\n".join(f"[{doc.id}] {doc.page_content}" for doc in documents)


def build_chain(base_url: str) -> Runnable[str, str]:
    """The app's chain, its chat model talking to ``base_url``."""
    retriever = KeywordRetriever(documents=chunks())
    # stream_usage: without it ChatOpenAI asks for no usage chunk when streaming.
    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-test", stream_usage=True)
    return (
        {"context": retriever | RunnableLambda(format_docs), "question": RunnablePassthrough()}
        | PROMPT
        | llm
        | StrOutputParser()
    )


def ask(chain: Runnable[str, str], question: str, tenant: str, session: str) -> str:
    """One request as a user would run it, with the caller's tenant in the OpenInference context."""
    from openinference.instrumentation import using_attributes

    with using_attributes(metadata={"tenant": tenant}, session_id=session):
        return chain.invoke(question)


def ask_streaming(chain: Runnable[str, str], question: str, tenant: str, session: str) -> str:
    """Like ``ask``, but streamed token by token, as a chat UI does."""
    from openinference.instrumentation import using_attributes

    with using_attributes(metadata={"tenant": tenant}, session_id=session):
        return "".join(chain.stream(question))


def expected_documents(question: str) -> list[Document]:
    """The retriever's documents for ``question``; call it uninstrumented."""
    return KeywordRetriever(documents=chunks()).invoke(question)


def _dump(base_url: str) -> None:
    chain = build_chain(base_url)
    ask(chain, "How many days does the refund policy allow?", "acme", "s-1")
    ask(chain, "When are invoices issued?", "initech", "s-2")
    ask_streaming(chain, "Is data encrypted at rest?", "umbrella", "s-3")


if __name__ == "__main__":
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from tests.conformance.span_dump import dump_spans

    dump_spans(LangChainInstrumentor(), _dump)
