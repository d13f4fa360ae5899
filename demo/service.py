"""The demo's synthetic RAG service: real OpenInference spans over OTLP/HTTP through the
opentelemetry-sdk exporter, a scripted incident timeline, and the user reactions the
review loop samples on (thumbs-down feedback, "are you sure?" follow-ups)."""

from __future__ import annotations

import functools
import http.client
import json
import random
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from demo.answers import answer, passage

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
PDF, HTML, MARKDOWN = "application/pdf", "text/html", "text/markdown"
ALL_DOCUMENT_TYPES = (PDF, HTML, MARKDOWN)
# The corpus answers each intent from some document types only: returns never from the
# markdown handbook, an empty cell of the coverage matrix (detectors/slices).
DOCUMENT_TYPES = {
    "billing": (PDF, HTML),
    "shipping": (HTML, MARKDOWN),
    "returns": (PDF, HTML),
    "account": (HTML, MARKDOWN, PDF),
}
# The scripted release (README "Releases and triage"): the service runs RELEASES[0] and
# switches to RELEASES[1] when the first latency incident starts.
SERVICE = "demo-rag"
RELEASES = ("1.4.0", "1.5.0")
# Shadow comparison (detectors/shadow): a share of requests also runs on the candidate
# pipeline as a shadow twin (rag.variant=shadow, the same rag.pair_id), which is slower
# in generate and on some probes filters out the gold document.
SHADOW_SHARE = 0.2
SHADOW_GENERATE_S = 0.12
SHADOW_GOLD_DROP_SHARE = 0.3
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
# The faithfulness incident: this share of its answers stray from their contexts
# (``demo.answers``), the rest stay faithful.
STRAY_SHARE = 0.7


@dataclass(frozen=True)
class Incident:
    name: str
    start: float  # share of the cycle
    end: float
    alert: str  # the alert it should fire (the live view says when its condition holds)


# The scripted timeline, as shares of one cycle.
TIMELINE = (
    Incident("slow generate stage", 0.20, 0.40, "RagStageLatencySLOBreach"),
    Incident("answers stray from the sources", 0.40, 0.55, "RagFaithfulnessLow"),
    Incident("cost spike (long prompts)", 0.55, 0.70, "RagCostPerQueryHigh"),
    Incident("bad locale filter", 0.70, 0.85, "RagFilterFalseExclusionHigh"),
    Incident("query-mix shift", 0.85, 1.00, "RagQueryDriftDetected"),
)


LATENCY_INCIDENT = TIMELINE[0]


def incident_at(elapsed: float, cycle_s: float) -> Incident | None:
    share = (elapsed % cycle_s) / cycle_s
    return next((i for i in TIMELINE if i.start <= share < i.end), None)


@dataclass
class DemoRequest:
    """The random draws of one request, sent as it is or as its shadow twin."""

    tenant: str
    intent: str
    session: str
    query: str
    model: str
    provider: str
    stages: dict[str, float]  # embed, retrieve, rerank, generate: seconds
    prompt_tokens: int
    completion_tokens: int
    documents: list[str]  # the top 5 before filtering; a probe's gold first
    document_types: list[str]
    probe: str | None
    locale: str
    excluded: list[str]  # removed by the relevance filter
    vector: list[float]
    stray: bool = False  # the answer strays from the contexts (``demo.answers``)
    attributes: dict[str, str] = field(default_factory=dict)  # variant and pair id


class SyntheticRagService:
    """Emits RAG requests as OpenInference spans at ``rate`` per second, from
    ``service.version`` ``RELEASES[0]`` until the first latency incident starts and
    ``RELEASES[1]`` from then on (the release that "caused" it), with a shadow twin for
    ``SHADOW_SHARE`` of them."""

    def __init__(self, endpoint: str, cycle_s: float, rate: float = RATE_PER_S, seed: int = 7):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # service.version is a resource attribute: one provider (and exporter) per release.
        self._providers = {}
        for version in RELEASES:
            resource = Resource.create(
                {
                    "service.name": SERVICE,
                    "service.version": version,
                    "deployment.environment": "demo",
                }
            )
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=250)
            )
            self._providers[version] = provider
        self._tracers = {v: p.get_tracer("rag-monitor-demo") for v, p in self._providers.items()}
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
        self.shadow_sent = 0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for provider in self._providers.values():
            provider.shutdown()  # flushes the exporter

    @property
    def cycle_s(self) -> float:
        return self._cycle_s

    def elapsed(self) -> float:
        """Seconds since the service started: where it stands on its timeline."""
        return time.monotonic() - self._started

    def current_incident(self) -> Incident | None:
        return incident_at(self.elapsed(), self._cycle_s)

    def current_version(self) -> str:
        """The release serving now: the new one from the first latency incident on."""
        return release_at(self.elapsed(), self._cycle_s)

    def _run(self) -> None:
        interval = 1.0 / self._rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._emit(self.current_incident())
            self.sent += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _emit(self, incident: Incident | None) -> None:
        rng = self._random
        tracer = self._tracers[self.current_version()]
        request = self._draw(rng, incident.name if incident else "")
        twin = rng.random() < SHADOW_SHARE
        if twin:
            request.attributes["rag.pair_id"] = format(rng.getrandbits(64), "016x")
        trace_id = _send(tracer, request)
        if twin:
            _send(tracer, shadow_of(request, rng))
            self.shadow_sent += 1
        self._react(rng, trace_id)

    def _draw(self, rng: random.Random, name: str) -> DemoRequest:
        """One request's draws under the incident ``name`` (empty: none)."""
        tenant = rng.choice(TENANTS)
        intent = rng.choice(INTENTS)
        session, query = self._next_query(rng, intent)
        model, provider = _weighted(rng, GENERATORS)
        if name.startswith("cost"):  # long prompts routed to the large model
            model, provider = "gpt-4o", "openai"
        slow = 4.0 if name.startswith("slow") else 1.0
        stages = {
            "embed": rng.lognormvariate(-4.5, 0.3),
            "retrieve": rng.lognormvariate(-2.7, 0.4),
            "rerank": rng.lognormvariate(-3.2, 0.3),
            "generate": rng.lognormvariate(-0.6, 0.35) * slow,
        }
        documents = [f"{tenant}-doc-{rng.randrange(200)}" for _ in range(5)]
        probe = None
        if rng.random() < PROBE_SHARE:
            probe, documents[0] = probe_and_gold(tenant, rng.randrange(PROBES_PER_TENANT))
        bad_locale = name.startswith("bad locale")
        shift = 1.5 if name.startswith("query-mix") else 0.0
        return DemoRequest(
            tenant=tenant,
            intent=intent,
            session=session,
            query=query,
            model=model,
            provider=provider,
            stages=stages,
            prompt_tokens=int(rng.uniform(600, 1500) * (20 if name.startswith("cost") else 1)),
            completion_tokens=int(rng.uniform(60, 300)),
            documents=documents,
            document_types=[rng.choice(DOCUMENT_TYPES[intent]) for _ in documents],
            probe=probe,
            locale="en-US" if bad_locale else rng.choice(LOCALES),
            # The bad predicate drops the top document (a probe's gold) with another one.
            excluded=[documents[0], documents[4]] if bad_locale else [],
            vector=[rng.gauss(shift if i < 4 else 0.0, 1.0) for i in range(DIMENSIONS)],
            stray=name.startswith("answers stray") and rng.random() < STRAY_SHARE,
        )

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


def _documents(
    prefix: str,
    doc_ids: list[str],
    types: dict[str, str],
    *,
    tenant: str,
    intent: str,
    locale: str,
) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for index, doc_id in enumerate(doc_ids):
        base = f"{prefix}.{index}.document"
        attributes[f"{base}.id"] = doc_id
        attributes[f"{base}.content"] = passage(doc_id, tenant, intent)
        attributes[f"{base}.score"] = round(0.9 - 0.1 * index, 3)
        # file_type as LlamaIndex's readers set it (detectors.slices.document_type_key)
        metadata = {"tenant": tenant, "locale": locale, "file_type": types[doc_id]}
        attributes[f"{base}.metadata"] = json.dumps(metadata)
    return attributes


def release_at(elapsed: float, cycle_s: float) -> str:
    """The demo's release: the old one until the first latency incident of the first
    cycle starts, then the new one for good (the release an operator would suspect)."""
    return RELEASES[1] if elapsed >= release_start(RELEASES[1], cycle_s) else RELEASES[0]


def release_start(version: str, cycle_s: float) -> float:
    """Seconds after the start at which ``version`` (one of ``RELEASES``) starts serving."""
    return 0.0 if version == RELEASES[0] else LATENCY_INCIDENT.start * cycle_s


def shadow_of(request: DemoRequest, rng: random.Random) -> DemoRequest:
    """The candidate pipeline's twin of ``request``: never served, a bit slower to generate,
    and on a share of probes its filter drops the gold document."""
    stages = {**request.stages, "generate": request.stages["generate"] + SHADOW_GENERATE_S}
    excluded = list(request.excluded)
    gold = request.documents[0]
    if request.probe and gold not in excluded and rng.random() < SHADOW_GOLD_DROP_SHARE:
        excluded.append(gold)
    attributes = {**request.attributes, "rag.variant": "shadow"}
    return replace(request, stages=stages, excluded=excluded, attributes=attributes)


def _send(tracer: Any, request: DemoRequest) -> str:
    """Emit ``request`` as a CHAIN root with its four stages, its answer generated from
    the first document the filter kept; returns the trace id."""
    from opentelemetry.trace import set_span_in_context

    now = time.time_ns()
    retrieved = [d for d in request.documents if d not in request.excluded]
    said = answer(retrieved[0], request.tenant, request.intent, stray=request.stray)
    types = dict(zip(request.documents, request.document_types, strict=True))
    root = tracer.start_span(
        "rag.request",
        start_time=now,
        attributes={
            "openinference.span.kind": "CHAIN",
            "input.value": request.query,
            "output.value": said,
            "rag.tenant": request.tenant,
            "rag.intent": request.intent,
            "session.id": request.session,
            **({"rag.probe_id": request.probe} if request.probe else {}),
            **request.attributes,
        },
    )
    context = set_span_in_context(root)
    documents = functools.partial(
        _documents, tenant=request.tenant, intent=request.intent, locale=request.locale
    )
    stages: tuple[tuple[str, dict[str, Any]], ...] = (
        ("embed", {
            "openinference.span.kind": "EMBEDDING", "embedding.model_name": EMBEDDER[0],
            "llm.provider": EMBEDDER[1], "llm.token_count.prompt": 8 + len(request.query) // 4,
            "embedding.embeddings.0.embedding.vector": request.vector,
        }),
        ("retrieve", {
            "openinference.span.kind": "RETRIEVER",
            "rag.filter.predicate": f"locale = '{request.locale}'",
            "rag.filter.relevance_excluded": request.excluded,
            **documents("retrieval.documents", retrieved, types),
        }),
        ("rerank", {
            "openinference.span.kind": "RERANKER",
            **documents("reranker.output_documents", retrieved[:3], types),
        }),
        ("generate", {
            "openinference.span.kind": "LLM", "llm.model_name": request.model,
            "llm.provider": request.provider, "llm.token_count.prompt": request.prompt_tokens,
            "llm.token_count.completion": request.completion_tokens,
        }),
    )  # fmt: skip
    t = now
    for stage, attributes in stages:
        span = tracer.start_span(stage, context=context, start_time=t, attributes=attributes)
        t += int(request.stages[stage] * 1e9)
        span.end(end_time=t)
    root.end(end_time=t)
    return format(root.get_span_context().trace_id, "032x")
