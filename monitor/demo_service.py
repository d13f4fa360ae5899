"""The demo's synthetic RAG service: real OpenInference spans over OTLP/HTTP through the
opentelemetry-sdk exporter, a scripted incident timeline, and the user reactions the
review loop samples on (thumbs-down feedback, "are you sure?" follow-ups)."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger("rag_monitor.demo")

RATE_PER_S = 20.0
DEFAULT_CYCLE_S = 300.0

# Models with real prices in the genai-prices table.
GENERATORS = (
    ("gpt-4o-mini", "openai", 0.6),
    ("gpt-4o", "openai", 0.3),
    ("claude-3-5-haiku-latest", "anthropic", 0.1),
)
EMBEDDER = ("text-embedding-3-small", "openai")
TENANTS = ("acme", "globex", "initech")
INTENTS = ("billing", "shipping", "returns", "account")
LOCALES = ("en-US", "en-GB", "de-DE", "fr-FR")
DIMENSIONS = 16
# A tenth of the requests replay golden-set probes, so that the false-exclusion
# rate and recall have labelled evidence (see README "Relevance filter").
PROBE_SHARE = 0.1
PROBES_PER_TENANT = 10
# User reactions for the review loop (README "Human review"): a share of answers gets a
# thumbs-down, and a share of requests is a doubtful follow-up in the previous session.
THUMBS_DOWN_SHARE = 0.03
FOLLOW_UP_SHARE = 0.03
FEEDBACK_DELAY_S = 3.0
FOLLOW_UPS = ("are you sure?", "but what about international orders?")


@dataclass(frozen=True)
class Incident:
    name: str
    start: float  # share of the cycle
    end: float


# The scripted timeline, as shares of one cycle. The filter and drift incidents
# feed detectors of later versions; their attributes are already on the spans.
TIMELINE = (
    Incident("slow generate stage", 0.20, 0.40),
    Incident("cost spike (long prompts)", 0.50, 0.65),
    Incident("bad locale filter", 0.70, 0.85),
    Incident("query-mix shift", 0.85, 1.00),
)


def incident_at(elapsed: float, cycle_s: float) -> Incident | None:
    share = (elapsed % cycle_s) / cycle_s
    return next((i for i in TIMELINE if i.start <= share < i.end), None)


class SyntheticRagService:
    """Emits RAG requests as OpenInference spans at ``rate`` per second."""

    def __init__(self, endpoint: str, cycle_s: float, rate: float = RATE_PER_S, seed: int = 7):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._provider = TracerProvider(resource=Resource.create({"service.name": "demo-rag"}))
        self._provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=250)
        )
        self._tracer = self._provider.get_tracer("rag-monitor-demo")
        self._cycle_s = cycle_s
        self._rate = rate
        self._random = random.Random(seed)
        self._feedback_url = endpoint.rsplit("/v1/", 1)[0] + "/v1/feedback"
        self._last_session: str | None = None
        self._feedback_failed = False
        self._feedback_due: deque[tuple[float, dict[str, str]]] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-service", daemon=True)
        self._started = time.monotonic()
        self.sent = 0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._provider.shutdown()  # flushes the exporter

    def current_incident(self) -> Incident | None:
        return incident_at(time.monotonic() - self._started, self._cycle_s)

    def _run(self) -> None:
        interval = 1.0 / self._rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._emit(self.current_incident())
            self.sent += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _emit(self, incident: Incident | None) -> None:
        from opentelemetry.trace import set_span_in_context

        rng = self._random
        name = incident.name if incident else ""
        tenant = rng.choice(TENANTS)
        intent = rng.choice(INTENTS)
        session, query = self._next_query(rng, intent)
        model, provider = _weighted(rng, GENERATORS)
        if name.startswith("cost"):  # long prompts routed to the large model
            model, provider = "gpt-4o", "openai"
        now = time.time_ns()
        embed_s = rng.lognormvariate(-4.5, 0.3)
        retrieve_s = rng.lognormvariate(-2.7, 0.4)
        rerank_s = rng.lognormvariate(-3.2, 0.3)
        generate_s = rng.lognormvariate(-0.6, 0.35) * (4.0 if name.startswith("slow") else 1.0)
        prompt_tokens = int(rng.uniform(600, 1500) * (20 if name.startswith("cost") else 1))
        completion_tokens = int(rng.uniform(60, 300))
        documents = [f"{tenant}-doc-{rng.randrange(200)}" for _ in range(5)]
        probe = None
        if rng.random() < PROBE_SHARE:
            probe, documents[0] = probe_and_gold(tenant, rng.randrange(PROBES_PER_TENANT))
        locale = "en-US" if name.startswith("bad locale") else rng.choice(LOCALES)
        # The bad predicate drops the top document (a probe's gold) with another one.
        excluded = [documents[0], documents[4]] if name.startswith("bad locale") else []
        retrieved = [d for d in documents if d not in excluded]
        shift = 1.5 if name.startswith("query-mix") else 0.0
        vector = [rng.gauss(shift if i < 4 else 0.0, 1.0) for i in range(DIMENSIONS)]

        total_s = embed_s + retrieve_s + rerank_s + generate_s
        root = self._tracer.start_span(
            "rag.request",
            start_time=now,
            attributes={
                "openinference.span.kind": "CHAIN",
                "input.value": query,
                "output.value": "synthetic answer",
                "rag.tenant": tenant,
                "rag.intent": intent,
                "session.id": session,
                **({"rag.probe_id": probe} if probe else {}),
            },
        )
        context = set_span_in_context(root)
        t = now
        stages: tuple[tuple[str, float, dict[str, Any]], ...] = (
            ("embed", embed_s, {
                "openinference.span.kind": "EMBEDDING", "embedding.model_name": EMBEDDER[0],
                "llm.provider": EMBEDDER[1], "llm.token_count.prompt": rng.randint(8, 40),
                "embedding.embeddings.0.embedding.vector": vector,
            }),
            ("retrieve", retrieve_s, {
                "openinference.span.kind": "RETRIEVER",
                "rag.filter.predicate": f"locale = '{locale}'",
                "rag.filter.relevance_excluded": excluded,
                **_documents("retrieval.documents", retrieved, tenant, locale),
            }),
            ("rerank", rerank_s, {
                "openinference.span.kind": "RERANKER",
                **_documents("reranker.output_documents", retrieved[:3], tenant, locale),
            }),
            ("generate", generate_s, {
                "openinference.span.kind": "LLM", "llm.model_name": model,
                "llm.provider": provider, "llm.token_count.prompt": prompt_tokens,
                "llm.token_count.completion": completion_tokens,
            }),
        )  # fmt: skip
        for stage, seconds, attributes in stages:
            span = self._tracer.start_span(
                stage, context=context, start_time=t, attributes=attributes
            )
            span.end(end_time=t + int(seconds * 1e9))
            t += int(seconds * 1e9)
        root.end(end_time=now + int(total_s * 1e9))
        self._react(rng, format(root.get_span_context().trace_id, "032x"))

    def _react(self, rng: random.Random, trace_id: str) -> None:
        """Now and then a thumbs-down, sent once the trace has been exported and assembled
        (as a user reacts later); then send the reactions that are due."""
        if rng.random() < THUMBS_DOWN_SHARE:
            record = {"trace_id": trace_id, "kind": "thumbs_down", "reason": "wrong"}
            self._feedback_due.append((time.monotonic() + FEEDBACK_DELAY_S, record))
        while self._feedback_due and self._feedback_due[0][0] <= time.monotonic():
            self._send_feedback(self._feedback_due.popleft()[1])

    def _next_query(self, rng: random.Random, intent: str) -> tuple[str, str]:
        """The session and query of the next request: now and then a follow-up that doubts
        the previous answer, in the previous request's session."""
        if self._last_session is not None and rng.random() < FOLLOW_UP_SHARE:
            return self._last_session, rng.choice(FOLLOW_UPS)
        self._last_session = f"session-{rng.randrange(500)}"
        return self._last_session, f"synthetic {intent} question {rng.randrange(2000)}"

    def _send_feedback(self, record: dict[str, str]) -> None:
        url = urllib.parse.urlsplit(self._feedback_url)
        connection = http.client.HTTPConnection(url.netloc, timeout=5)
        try:
            connection.request(
                "POST", url.path, json.dumps(record), {"Content-Type": "application/json"}
            )
            connection.getresponse().read()
        except (OSError, http.client.HTTPException) as exc:
            if not self._feedback_failed:  # the demo goes on; one line, not one per request
                self._feedback_failed = True
                log.warning("demo_feedback_failed", error=type(exc).__name__)
        finally:
            connection.close()


def probe_and_gold(tenant: str, number: int) -> tuple[str, str]:
    """The probe id and its one gold document, in the caller's tenant."""
    return f"demo-{tenant}-{number}", f"{tenant}-gold-{number}"


def _weighted(rng: random.Random, choices: tuple[tuple[str, str, float], ...]) -> tuple[str, str]:
    model, provider, _ = rng.choices(choices, weights=[w for *_, w in choices])[0]
    return model, provider


def _documents(prefix: str, doc_ids: list[str], tenant: str, locale: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for index, doc_id in enumerate(doc_ids):
        base = f"{prefix}.{index}.document"
        attributes[f"{base}.id"] = doc_id
        attributes[f"{base}.content"] = f"synthetic passage {doc_id}"
        attributes[f"{base}.score"] = round(0.9 - 0.1 * index, 3)
        attributes[f"{base}.metadata"] = json.dumps({"tenant": tenant, "locale": locale})
    return attributes
