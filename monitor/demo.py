"""``rag-monitor demo``: the sidecar plus a synthetic RAG service with scripted incidents.

The service sends real OTLP/HTTP spans with OpenInference attributes through
the opentelemetry-sdk exporter, so the demo exercises the same path as
production traffic. The timeline cycles through incidents; a live terminal
view (or, without a TTY, a log line every 10 s) shows what the sidecar sees.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from monitor.config import Config
from monitor.promql import REQUESTS_TOTAL

log = structlog.get_logger("rag_monitor.demo")

RATE_PER_S = 20.0
DEFAULT_CYCLE_S = 300.0
SUMMARY_EVERY_S = 10.0

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
                "input.value": f"synthetic {intent} question {rng.randrange(2000)}",
                "output.value": "synthetic answer",
                "rag.tenant": tenant,
                "rag.intent": intent,
                "session.id": f"session-{rng.randrange(500)}",
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


def probe_and_gold(tenant: str, number: int) -> tuple[str, str]:
    """The probe id and its one gold document, in the caller's tenant."""
    return f"demo-{tenant}-{number}", f"{tenant}-gold-{number}"


def with_demo_settings(config: Config) -> Config:
    """The demo's golden set (unless the config names one) and drift windows sized to its
    20 requests/s, so that the incidents show within minutes."""
    detectors = config.detectors
    filter_exclusion = detectors.filter_exclusion
    if filter_exclusion.golden_set is None:
        path = config.service.state_dir / "demo-golden-set.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for tenant in TENANTS:
            for number in range(PROBES_PER_TENANT):
                probe, gold = probe_and_gold(tenant, number)
                lines.append(json.dumps({"probe_id": probe, "gold_doc_ids": [gold]}))
        path.write_text("\n".join(lines) + "\n")
        filter_exclusion = filter_exclusion.model_copy(update={"golden_set": path})
    drift = detectors.drift.model_copy(
        update={"reference_size": 400, "window_size": 200, "test_every_records": 100}
    )
    update = {"filter_exclusion": filter_exclusion, "drift": drift}
    return config.model_copy(update={"detectors": detectors.model_copy(update=update)})


FETCH_HOW = (
    "run `rag-monitor models fetch` (with the demo's --config, if any) on a machine that "
    "reaches huggingface.co, then start the demo again; it runs on without this detector"
)


def warn_missing_models(config: Config) -> list[str]:
    """Log, per model a detector needs and this machine lacks, the command that fetches it."""
    from monitor.components import load_components

    missing = []
    for component in load_components():
        section = getattr(config.detectors, component.name, None)
        if component.models is None or section is None:
            continue
        for model in component.models.missing(section):
            log.warning(
                "demo_model_missing", detector=component.name, model=model, how_to_fix=FETCH_HOW
            )
            missing.append(model)
    return missing


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


@dataclass
class Snapshot:
    """What the terminal view shows, read from the sidecar's own registry."""

    requests: float
    requests_per_s: float
    recorded: dict[str, float]  # the recording rules' series over the last interval
    guardrails: dict[str, str]  # each alert's condition: ok, BREACH, no evidence yet, ...


class Summarizer:
    """Evaluates the generated rules (``rag-monitor rules`` for this config) on the
    sidecar's registry over the interval since the last snapshot."""

    def __init__(self, registry: CollectorRegistry, rules: dict[str, Any]) -> None:
        from monitor.rule_evaluation import RuleEvaluator

        self._registry = registry
        self._rules = RuleEvaluator(rules, registry)
        self._last_time: float | None = None
        self._last_requests = 0.0

    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        requests = sum(
            sample.value
            for metric in self._registry.collect()
            for sample in metric.samples
            if sample.name == REQUESTS_TOTAL
        )
        elapsed = None if self._last_time is None else max(now - self._last_time, 1e-9)
        per_s = 0.0 if elapsed is None else (requests - self._last_requests) / elapsed
        self._last_requests, self._last_time = requests, now
        recorded, guardrails = self._rules.evaluate()
        return Snapshot(requests, per_s, recorded, guardrails)


def _table(snapshot: Snapshot, incident: Incident | None) -> Any:
    from rich.table import Table

    table = Table(
        title="rag-monitor demo", caption=f"incident: {incident.name if incident else 'none'}"
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{snapshot.requests:.0f} ({snapshot.requests_per_s:.1f}/s)")
    for series, value in snapshot.recorded.items():
        table.add_row(series, f"{value:.4g}")
    for name, state in snapshot.guardrails.items():
        table.add_row(f"alert {name}", state)
    return table


def run_demo(
    config: Config, duration_s: float | None, build_rules: Callable[[Config], dict[str, Any]]
) -> int:
    """Run the sidecar and the synthetic service until ``duration_s`` or a signal.

    ``build_rules`` is ``rag-monitor rules``' generator (``alerts.rules.build_rules``):
    the live view evaluates exactly the generated conditions, never its own copy.
    """
    from monitor.sidecar import Sidecar

    config = with_demo_settings(config)
    warn_missing_models(config)
    sidecar = Sidecar(config)
    sidecar.start()
    http = config.collectors.otlp.http
    if sidecar.http is None:
        log.error("demo_needs_otlp_http", hint="set collectors.otlp.http.enabled: true")
        sidecar.shutdown()
        return 1
    endpoint = f"http://{http.host}:{sidecar.http.port}/v1/traces"
    service = SyntheticRagService(endpoint, cycle_s=duration_s or DEFAULT_CYCLE_S)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    service.start()
    log.info(
        "demo_started",
        metrics=f"http://{config.service.metrics.host}:{sidecar.metrics_server.port}/metrics",
        rate_per_s=RATE_PER_S,
        duration_s=duration_s,
    )
    summarizer = Summarizer(sidecar.registry, build_rules(config))
    deadline = time.monotonic() + duration_s if duration_s else float("inf")
    try:
        for snapshot in _views(summarizer, stop, deadline, service):
            del snapshot
    finally:
        service.shutdown()
        sidecar.shutdown()
    log.info("demo_stopped", sent=service.sent)
    return 0


def _views(
    summarizer: Summarizer, stop: threading.Event, deadline: float, service: SyntheticRagService
) -> Iterator[Snapshot]:
    """Refresh the live view (TTY) or log a summary every 10 s until told to stop."""
    if sys.stdout.isatty():
        from rich.live import Live

        with Live(refresh_per_second=2) as live:
            while not stop.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                snapshot = summarizer.snapshot()
                live.update(_table(snapshot, service.current_incident()))
                yield snapshot
                if time.monotonic() >= deadline:
                    return
        return
    while not stop.wait(min(SUMMARY_EVERY_S, max(0.0, deadline - time.monotonic()))):
        snapshot = summarizer.snapshot()
        incident = service.current_incident()
        log.info(
            "demo_summary",
            requests=snapshot.requests,
            requests_per_s=round(snapshot.requests_per_s, 2),
            recorded={series: round(value, 6) for series, value in snapshot.recorded.items()},
            incident=incident.name if incident else None,
            guardrails=snapshot.guardrails,
        )
        yield snapshot
        if time.monotonic() >= deadline:
            return
