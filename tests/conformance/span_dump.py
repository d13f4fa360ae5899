"""Write the spans a framework's own instrumentation emits, as JSON, to see its shapes.

Each ``*_app.py`` here runs as ``python -m tests.conformance.<app> OUT.json``:
a few requests through the real framework, fake models, spans kept in memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conformance.fake_openai import FakeOpenAI


def dump_spans(
    instrumentor: Any,
    run: Callable[[str], None],
    plans: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """Instrument, ``run(fake_openai_base_url)``, and write the spans to ``sys.argv[1]``;
    ``plans``: the fake model's tool calls per question (agents)."""
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python -m {sys.argv[0]} OUT.json")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fake = FakeOpenAI(plans=dict(plans or {})).start()
    instrumentor.instrument(tracer_provider=provider)
    try:
        run(fake.base_url)
    finally:
        instrumentor.uninstrument()
        fake.stop()
    spans = [json.loads(span.to_json()) for span in exporter.get_finished_spans()]
    out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(spans, indent=1))
    print(f"{len(spans)} spans -> {out}")
