"""LangChain (LCEL) with OpenLLMetry (Traceloop's opentelemetry-instrumentation-langchain and
-openai), end to end into the sidecar.

The same app as ``test_langchain.py``, instrumented the way ``Traceloop.init()`` does it:
both the LangChain and the OpenAI instrumentation (the second stays silent under the
first). Its shapes: the request is a ``workflow`` span whose JSON
``traceloop.entity.input``/``output`` wrap the chain's value; the retriever is a
``vector_db_retrieve`` task span whose ``traceloop.entity.output`` lists ``page_content``
and ``metadata`` of each document but drops LangChain's ``Document.id``; the model call is
a GenAI ``chat`` span; the caller's tenant rides in LangChain's run ``metadata``, which
the instrumentation writes as ``traceloop.association.properties.<key>``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import genai_prices
import opentelemetry.instrumentation.langchain as langchain_instrumentation
import opentelemetry.instrumentation.openai.v1 as openai_instrumentation
import pytest
from langchain_core.documents import Document
from langchain_core.runnables import Runnable
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.instrumentation.utils import unwrap

from collectors.spans.documents import derived_id
from monitor.contract.trace import RagTrace, Usage
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI, Reply
from tests.conformance.langchain_app import MODEL, build_chain, expected_documents

pytestmark = pytest.mark.integration

# (question, caller tenant); the retrieved chunks belong to other tenants too.
REQUESTS: tuple[tuple[str, str], ...] = (
    ("How many days does the refund policy allow?", "acme"),
    ("When are invoices issued?", "initech"),
    ("Is data encrypted at rest?", "umbrella"),
    ("How long does shipping to Europe take?", "globex"),
    ("What does the warranty cover?", "hooli"),
)
N = len(REQUESTS)
# Longer than assembly grace (0.3 s) plus the batch delay (0.1 s): a split trace would show up.
SETTLE_S = 1.0
SCOPE = "opentelemetry.instrumentation.langchain"

Ask = Callable[[Runnable[str, str], str, str], str]


def ask(chain: Runnable[str, str], question: str, tenant: str) -> str:
    """One request, the caller's tenant in LangChain's run metadata."""
    return chain.invoke(question, config={"metadata": {"tenant": tenant}})


def ask_streaming(chain: Runnable[str, str], question: str, tenant: str) -> str:
    """Like ``ask``, streamed token by token, as a chat UI does."""
    return "".join(chain.stream(question, config={"metadata": {"tenant": tenant}}))


@dataclass(frozen=True)
class Sent:
    """What the app sent and got back for one request."""

    question: str
    tenant: str
    answer: str
    documents: list[Document]


class _Traceloop:
    """Both instrumentations, as ``Traceloop.init()`` installs them."""

    def __init__(self) -> None:
        self.parts = (LangchainInstrumentor(), OpenAIInstrumentor())

    def instrument(self, **kwargs: Any) -> None:
        for part in self.parts:
            part.instrument(**kwargs)

    def uninstrument(self) -> None:
        # 0.62.4 unwraps with a dotted attribute (unwrap("langchain_core.callbacks",
        # "BaseCallbackManager.__init__")), which opentelemetry's unwrap() does not follow:
        # its wrappers would stay, and the next test's instrument() would stack a new
        # callback handler under the old one, bound to a tracer provider shut down since.
        with pytest.MonkeyPatch.context() as patch:
            for module in (langchain_instrumentation, openai_instrumentation):
                patch.setattr(module, "unwrap", _dotted_unwrap)
            for part in self.parts:
                part.uninstrument()


def _dotted_unwrap(owner: object, attribute: str) -> None:
    """``opentelemetry.instrumentation.utils.unwrap`` that follows ``Class.method``."""
    if isinstance(owner, str):
        if owner not in sys.modules:
            return  # never imported, so never wrapped
        owner = sys.modules[owner]
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    unwrap(owner, name)


def run_requests(
    conformance: Conformance, fake_openai: FakeOpenAI, ask_fn: Ask
) -> tuple[list[Sent], list[RagTrace], list[Reply]]:
    expected = {question: expected_documents(question) for question, _ in REQUESTS}
    chain = build_chain(fake_openai.base_url)
    uninstrument = instrumented(_Traceloop(), conformance.provider)
    try:
        sent = [
            Sent(question, tenant, ask_fn(chain, question, tenant), expected[question])
            for question, tenant in REQUESTS
        ]
    finally:
        uninstrument()
    conformance.traces(N)
    time.sleep(SETTLE_S)
    # Requests ran one after another, so start time pairs traces and replies with requests.
    traces = sorted(conformance.recorder.traces, key=lambda trace: trace.time)
    replies = [reply for reply in fake_openai.replies if reply.kind == "chat"]
    assert len(traces) == N
    assert conformance.metric("rag_requests_total", source="otlp") == N
    assert len(replies) == N
    # A request without retrieved chunks would make the context checks vacuous.
    assert all(request.documents for request in sent)
    return sent, traces, replies


def check_request(trace: RagTrace, request: Sent, reply: Reply) -> None:
    assert trace.query == request.question
    assert trace.answer == request.answer
    assert trace.tenant == request.tenant
    assert trace.instrumentation == SCOPE
    assert {"retrieve", "generate", "total"} <= trace.stages.keys()
    assert 0 < trace.stages["retrieve"] <= trace.stages["total"]
    assert 0 < trace.stages["generate"] <= trace.stages["total"]
    assert trace.usage == (
        Usage(
            model=MODEL,
            provider="openai",
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        ),
    )


def check_cost(conformance: Conformance, replies: list[Reply]) -> None:
    expected = sum(
        float(
            genai_prices.calc_price(
                genai_prices.Usage(
                    input_tokens=reply.prompt_tokens, output_tokens=reply.completion_tokens
                ),
                model_ref=MODEL,
                provider_id="openai",
            ).total_price
        )
        for reply in replies
    )
    assert conformance.metric("rag_request_cost_usd_count") == N
    assert conformance.metric("rag_request_cost_usd_sum") == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("ask_fn", [ask, ask_streaming], ids=["invoke", "stream"])
def test_each_request_maps_field_by_field(
    conformance: Conformance, fake_openai: FakeOpenAI, ask_fn: Ask
) -> None:
    """Each request is one RagTrace: query, answer, tenant, contexts (source id from the
    metadata, text, tenant; no chunk id, the instrumentation drops it), retrieved ids,
    retrieve/generate/total stages, usage and cost."""
    sent, traces, replies = run_requests(conformance, fake_openai, ask_fn)
    assert all(reply.streamed == (ask_fn is ask_streaming) for reply in replies)
    for trace, request, reply in zip(traces, sent, replies, strict=True):
        check_request(trace, request, reply)
        assert [(c.doc_id, c.chunk_id, c.text, c.tenant, c.id_derived) for c in trace.contexts] == [
            (doc.metadata["doc_id"], None, doc.page_content, doc.metadata["tenant"], False)
            for doc in request.documents
        ]
        assert list(trace.retrieved) == [doc.metadata["doc_id"] for doc in request.documents]
        # The instrumentation records no first-token event or time: a ttft would be made up.
        assert "ttft" not in trace.stages
    check_cost(conformance, replies)


@pytest.mark.parametrize(
    "conformance", [{"collectors": {"spans": {"mapping": {"doc_id_keys": []}}}}], indirect=True
)
def test_documents_without_any_id_stay_contexts_with_derived_ids(
    conformance: Conformance, fake_openai: FakeOpenAI
) -> None:
    """With no id anywhere (no Document.id in the output, no doc_id_keys in the metadata),
    every retrieved document is still a context with its text, under an id derived from it."""
    sent, traces, replies = run_requests(conformance, fake_openai, ask)
    for trace, request, reply in zip(traces, sent, replies, strict=True):
        check_request(trace, request, reply)
        assert [(c.doc_id, c.text, c.tenant, c.id_derived) for c in trace.contexts] == [
            (derived_id(doc.page_content), doc.page_content, doc.metadata["tenant"], True)
            for doc in request.documents
        ]
        assert trace.retrieved == tuple(derived_id(doc.page_content) for doc in request.documents)
