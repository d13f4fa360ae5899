"""The onboarding loop of issue 24: traces of an instrumentation the mapping does not know
(documents under an unknown attribute) go unseen, ``rag-monitor inspect`` on a file of them
names the attribute and prints the ``mapping:`` snippet, and with that snippet in the
config the sidecar sees the contexts of every request."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context

from monitor.contract.field_presence import DEFAULT_INSTRUMENTATIONS
from tests.conftest import REPO, SidecarProcess, to_otlp_json, wait_until
from tests.integration.conftest import otlp_http_port
from tests.otel_traffic import MemoryExporter

pytestmark = pytest.mark.integration

TRACES = 1000
TRACES_PER_EXPORT = 50  # the Collector's file exporter writes one export request a line
UNKNOWN_SCOPE = "acme.rag.tracer"  # in no instrumentation allow-list
HITS = "acme.retrieval.hits"
MS = 1_000_000
# Neither the HHEM model nor drift references are needed to count fields.
LIGHT = {"detectors": {"faithfulness": {"enabled": False}, "drift": {"enabled": False}}}


def unknown_instrumentation_spans(count: int) -> list[ReadableSpan]:
    """``count`` requests through the real SDK: a root with plain input/output values, a
    "search" span whose documents sit in ``acme.retrieval.hits`` (JSON), a GenAI chat span."""
    exporter = MemoryExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-rag"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(UNKNOWN_SCOPE)
    start = time.time_ns()
    for i in range(count):
        t = start + i * MS
        root = tracer.start_span(
            "rag",
            start_time=t,
            attributes={
                "input.value": f"how long may parcel {i} be returned?",
                "output.value": "Parcels may be returned for thirty days.",
            },
        )
        context = set_span_in_context(root)
        hits = [
            {"id": f"doc-{i}-a", "text": "Parcels may be returned within thirty days."},
            {"id": f"doc-{i}-b", "text": "Shipping is free above fifty euros."},
        ]
        tracer.start_span(
            "search", context=context, start_time=t, attributes={HITS: json.dumps(hits)}
        ).end(end_time=t + 40 * MS)
        tracer.start_span(
            "chat",
            context=context,
            start_time=t + 40 * MS,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 310,
                "gen_ai.usage.output_tokens": 12,
            },
        ).end(end_time=t + 400 * MS)
        root.end(end_time=t + 410 * MS)
    provider.shutdown()
    return exporter.spans


def write_collector_file(spans: list[ReadableSpan], path: Path) -> None:
    """OTLP/JSON as the Collector's ``file`` exporter writes it: one export request a line."""
    per_line = 3 * TRACES_PER_EXPORT
    with path.open("wb") as out:
        for first in range(0, len(spans), per_line):
            body = encode_spans(spans[first : first + per_line]).SerializeToString()
            out.write(to_otlp_json(body) + b"\n")


def inspect(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", "inspect", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def contexts_coverage(sidecar: SidecarProcess, instrumentation: str) -> tuple[float, float]:
    """(present, missing) counts of the contexts field under ``instrumentation``."""
    labels = {"field": "contexts", "instrumentation": instrumentation}
    return (
        sidecar.metric("rag_trace_fields_total", present="true", **labels),
        sidecar.metric("rag_trace_fields_total", present="false", **labels),
    )


def test_inspect_names_the_documents_attribute_and_its_snippet_fills_the_coverage(
    tmp_path: Path, sidecar_process: Callable[..., SidecarProcess]
) -> None:
    """1,000 traces with documents under an unknown attribute: contexts present in 0 of
    1,000; inspect names acme.retrieval.hits and prints the snippet; with it in the config,
    contexts present in 1,000 of 1,000."""
    spans = unknown_instrumentation_spans(TRACES)
    traces_file = tmp_path / "traces.jsonl"
    write_collector_file(spans, traces_file)

    scripted = inspect(str(traces_file), "--json")
    assert scripted.returncode == 0, scripted.stderr
    reports = [json.loads(line) for line in scripted.stdout.splitlines()]
    assert len(reports) == TRACES
    snippets = {json.dumps(report["mapping"], sort_keys=True) for report in reports}
    assert snippets == {json.dumps({"document_attributes": [HITS]})}
    assert all("contexts" in report["missing"] for report in reports)
    assert all("contexts" in report["mapping_fills"]["document_attributes"] for report in reports)

    shown = inspect(str(traces_file))
    assert shown.returncode == 0, shown.stderr
    printed = shown.stdout.split(f"{TRACES} trace(s): {TRACES} RAG request(s), 0 not\n")[1]
    assert f"contexts missing in {TRACES}" in printed
    snippet = yaml.safe_load(printed.split("):\n", 1)[1])
    # The scope it saw is named too, so that coverage counts it by name, not as other.
    assert snippet == {
        "collectors": {"spans": {"mapping": {"document_attributes": [HITS]}}},
        "service": {"instrumentations": [*DEFAULT_INSTRUMENTATIONS, UNKNOWN_SCOPE]},
    }

    unseen = sidecar_process(LIGHT, "without-mapping").start()
    seen = sidecar_process({**LIGHT, **snippet}, "with-mapping").start()
    for sidecar in (unseen, seen):
        sidecar.wait_ready()
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{otlp_http_port(sidecar)}/v1/traces"
        )
        for first in range(0, len(spans), 600):
            exporter.export(spans[first : first + 600])
        exporter.shutdown()
    for sidecar, counted_as in ((unseen, "other"), (seen, UNKNOWN_SCOPE)):
        wait_until(
            lambda: sum(contexts_coverage(sidecar, counted_as)) == TRACES,  # noqa: B023
            timeout=60,
        )
    assert contexts_coverage(unseen, "other") == (0, TRACES)
    assert contexts_coverage(seen, UNKNOWN_SCOPE) == (TRACES, 0)
