"""Each verdict counted once, under its request's variant, into a running sidecar from the
real OpenTelemetry SDK and its OTLP exporters: a verdict sent as a span event and as a log
record, a log record sent right after its request's spans, an export the exporter retried."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry._logs import Logger
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, Tracer, set_span_in_context

from detectors.evaluations.names import DUPLICATES_TOTAL, RESULTS_TOTAL, UNMATCHED_TOTAL
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until
from tests.integration.test_evaluation_results import EVALUATIONS, EVENT
from tests.otel_traffic import tracer_for

pytestmark = pytest.mark.integration

Verdict = dict[str, str | float]  # a gen_ai.evaluation.result's attributes
EVALUATIONS_ONLY = {"evaluations": EVALUATIONS, "faithfulness": {"enabled": False}}


def request(
    tracer: Tracer, variant: str, verdicts: Sequence[Verdict] = (), logger: Logger | None = None
) -> SpanContext:
    """A request (a CHAIN root with an LLM child) of ``variant`` whose answer an evaluator in
    the app judged: each verdict an event on the LLM span and, with ``logger``, a log record
    in its context as well, emitted before the spans end (a simple processor exports the
    record at once: it reaches the sidecar before the spans). Returns the LLM span's context."""
    root = tracer.start_span("rag.request", attributes={
        "openinference.span.kind": "CHAIN", "input.value": "what is the refund policy?",
        "output.value": "Within 30 days.", "rag.variant": variant})  # fmt: skip
    llm = tracer.start_span("generate", context=set_span_in_context(root), attributes={
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"})  # fmt: skip
    for verdict in verdicts:
        llm.add_event(EVENT, verdict)
        if logger is not None:
            logger.emit(event_name=EVENT, context=set_span_in_context(llm), attributes=verdict)
    llm.end()
    root.end()
    return llm.get_span_context()


def log_records(endpoint: str) -> tuple[LoggerProvider, Logger]:
    """An evaluator's logger exporting each record as it is emitted, over OTLP/HTTP."""
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(HttpLogs(endpoint=endpoint)))
    return provider, provider.get_logger("evaluator")


def counts(sidecar: Sidecar, keys: Counter[tuple[str, str, str]]) -> Counter[tuple[str, str, str]]:
    """rag_evaluation_results_total per (evaluation, outcome, variant) of ``keys``."""
    return Counter({key: int(sample(sidecar.registry, RESULTS_TOTAL, evaluation=key[0],
                                    outcome=key[1], variant=key[2]))
                    for key in keys})  # fmt: skip


def test_each_verdict_sent_as_span_event_and_log_record_counts_once(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """12 requests (every fourth canary), each verdict of the app's evaluator sent twice,
    as an event on the evaluated span and as a log record in its context (which arrives
    first, before any span of its request): every verdict counts once under its request's
    variant, its second copy as a duplicate; none is unmatched. A judge's failure beside a
    verdict of the same evaluation on the same span is a result of its own."""
    sidecar = start_sidecar(detectors=EVALUATIONS_ONLY,
                            collectors={"spans": {"assembly": {"grace_s": 0.5}}})  # fmt: skip
    base = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    spans, tracer = tracer_for(HttpSpans(endpoint=f"{base}/v1/traces"))
    logs, logger = log_records(f"{base}/v1/logs")
    expected: Counter[tuple[str, str, str]] = Counter()
    for index in range(12):
        variant = "canary" if index % 4 == 3 else "production"
        relevant, factual = index % 3 != 0, index % 4 != 1
        judged: list[tuple[Verdict, str]] = [  # each verdict and the outcome EVALUATIONS give it
            ({"gen_ai.evaluation.name": "answer_relevancy",
              "gen_ai.evaluation.score.value": 0.9 if relevant else 0.4},
             "pass" if relevant else "fail"),
            ({"gen_ai.evaluation.name": "hallucination",
              "gen_ai.evaluation.score.label": "factual" if factual else "hallucinated"},
             "pass" if factual else "fail"),
        ]  # fmt: skip
        if index % 5 == 0:
            judged.append(({"gen_ai.evaluation.name": "hallucination", "error.type": "timeout"},
                           "error"))  # fmt: skip
        request(tracer, variant, [verdict for verdict, _ in judged], logger)
        expected.update((str(verdict["gen_ai.evaluation.name"]), outcome, variant)
                        for verdict, outcome in judged)  # fmt: skip
    spans.shutdown()
    logs.shutdown()
    assert {outcome for _, outcome, _ in expected} == {"pass", "fail", "error"}
    assert {variant for _, _, variant in expected} == {"production", "canary"}

    wait_until(lambda: counts(sidecar, expected) == expected, timeout=30)
    sent = sum(expected.values())
    assert sample(sidecar.registry, RESULTS_TOTAL) == sent
    assert sample(sidecar.registry, DUPLICATES_TOTAL) == sent
    assert sample(sidecar.registry, UNMATCHED_TOTAL) == 0
    # each record joined its request in assembly: none was handed on alone
    assert sample(sidecar.registry, "rag_monitor_events_total", type="evaluation_result") == 0


def test_a_log_record_100_ms_after_its_canary_request_counts_under_canary(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """A canary request's verdict sent as a log record 100 ms after the request's last span
    (its spans still in assembly, grace_s at its default): it joins the request and counts
    under canary, none unmatched."""
    sidecar = start_sidecar(detectors=EVALUATIONS_ONLY)
    base = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    spans, tracer = tracer_for(HttpSpans(endpoint=f"{base}/v1/traces"))
    logs, logger = log_records(f"{base}/v1/logs")
    evaluated = request(tracer, "canary")  # a simple processor exports each span as it ends
    time.sleep(0.1)
    logger.emit(event_name=EVENT, context=set_span_in_context(NonRecordingSpan(evaluated)),
                attributes={"gen_ai.evaluation.name": "answer_relevancy",
                            "gen_ai.evaluation.score.value": 0.3})  # fmt: skip
    logs.shutdown()
    spans.shutdown()

    canary = {"evaluation": "answer_relevancy", "outcome": "fail", "variant": "canary"}
    wait_until(lambda: sample(sidecar.registry, RESULTS_TOTAL, **canary) == 1)
    assert sample(sidecar.registry, RESULTS_TOTAL) == 1
    assert sample(sidecar.registry, UNMATCHED_TOTAL) == 0
    assert sample(sidecar.registry, "rag_monitor_events_total", type="evaluation_result") == 0


@dataclass
class LossyGateway:
    """A gateway in front of the sidecar that forwards every request but answers the first
    502 (``Retry-After: 0``), as a proxy that lost the sidecar's reply does: the exporter
    retries a body the sidecar already took."""

    upstream: str
    forwarded: list[bytes] = field(default_factory=list)
    url: str = ""

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers["Content-Length"]))
        headers = {k: v for k, v in handler.headers.items()
                   if k.lower() in ("content-type", "content-encoding")}  # fmt: skip
        sent = urllib.request.Request(self.upstream + handler.path, data=body, headers=headers,
                                      method="POST")  # fmt: skip
        with urllib.request.urlopen(sent, timeout=10) as response:
            status, reply = response.status, response.read()
        self.forwarded.append(body)
        if len(self.forwarded) == 1:
            status, reply = 502, b""
        handler.send_response(status)
        handler.send_header("Retry-After", "0")
        handler.send_header("Content-Length", str(len(reply)))
        handler.end_headers()
        handler.wfile.write(reply)


@contextmanager
def lossy_gateway(upstream: str) -> Iterator[LossyGateway]:
    gateway = LossyGateway(upstream)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            gateway.forward(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    gateway.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield gateway
    finally:
        server.shutdown()
        server.server_close()


def test_a_log_export_the_exporter_retried_counts_once(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """The OTLP log exporter retries an export whose reply a gateway lost: the sidecar
    receives the same body twice and counts its verdict once, the copy as a duplicate."""
    sidecar = start_sidecar(detectors=EVALUATIONS_ONLY,
                            collectors={"spans": {"assembly": {"grace_s": 0.2}}})  # fmt: skip
    base = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    spans, tracer = tracer_for(HttpSpans(endpoint=f"{base}/v1/traces"))
    evaluated = request(tracer, "canary")
    spans.shutdown()
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total") == 1)
    with lossy_gateway(base) as gateway:
        logs, logger = log_records(f"{gateway.url}/v1/logs")
        logger.emit(event_name=EVENT, context=set_span_in_context(NonRecordingSpan(evaluated)),
                    attributes={"gen_ai.evaluation.name": "hallucination",
                                "gen_ai.evaluation.score.label": "factual"})  # fmt: skip
        logs.shutdown()
    assert len(gateway.forwarded) == 2
    assert gateway.forwarded[0] == gateway.forwarded[1]

    wait_until(lambda: sample(sidecar.registry, DUPLICATES_TOTAL) == 1)
    canary = {"evaluation": "hallucination", "outcome": "pass", "variant": "canary"}
    assert sample(sidecar.registry, RESULTS_TOTAL, **canary) == 1
    assert sample(sidecar.registry, RESULTS_TOTAL) == 1
    assert sample(sidecar.registry, UNMATCHED_TOTAL) == 0
    assert sample(sidecar.registry, "rag_monitor_log_records_total", kind="evaluation") == 2
