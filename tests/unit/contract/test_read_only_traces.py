"""The values made per request (RagTrace, Context, Usage, EvaluationResult) are not frozen,
for speed (monitor/contract/trace.py says why): every detector shares them, so the built-in ones
must leave them as they were."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.contract.config import Config
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, EvaluationResult, Feedback, Label, RagTrace, Usage
from monitor.runtime.sidecar import build_detectors

T0 = datetime(2026, 12, 5, tzinfo=UTC)


def full_trace(number: int) -> RagTrace:
    """A request with every field a detector reads set, its mappings plain dicts."""
    trace_id = f"{number + 1:032x}"
    contexts = tuple(
        Context(f"doc-{i}", f"chunk-{i}", f"text {i} of request {number}", 0.9 - i / 10,
                "acme", {"tenant": "acme", "source": f"doc-{i}"})
        for i in range(4)
    )  # fmt: skip
    return RagTrace(
        trace_id=trace_id,
        time=T0 + timedelta(seconds=number),
        source="otlp",
        root_span_id=f"{number + 1:016x}",
        tenant="acme",
        user_id="user-1",
        session_id=f"session-{number % 3}",
        intent="billing",
        query=f"how do I pay invoice {number}?",
        answer="Use the billing page.",
        contexts=contexts,
        retrieved=(*(c.doc_id for c in contexts), "doc-9"),
        relevance_excluded=("doc-9",),
        stages={"embed": 0.01, "retrieve": 0.05, "generate": 0.4, "ttft": 0.1, "total": 0.5},
        usage=(Usage("gpt-4o-mini", "openai", 900, 120), Usage("text-embedding-3-small",
                                                               "openai", embedding_tokens=9)),
        query_embedding=tuple(float(i % 7) / 7 for i in range(16)),
        metadata={"channel": "web"},
        service_name="rag-api",
        service_version="1.4.2",
        deployment_environment="prod",
        instrumentation="openinference.instrumentation.langchain",
        evaluations=(EvaluationResult("hallucination", 0.2, "factual", trace_id=trace_id),),
    )  # fmt: skip


def test_the_built_in_detectors_leave_what_they_share_as_it_was(tmp_path: Path) -> None:
    """Every built-in detector the default configuration builds (faithfulness aside: it needs
    a model) observes 60 requests and their labels, feedback and evaluation results; each
    value is equal to a deep copy taken before, nested mappings included."""
    config = Config.model_validate(
        {"service": {"state_dir": str(tmp_path)}, "detectors": {"faithfulness": {"enabled": False}}}
    )
    detectors = build_detectors(config, SidecarRegistry())
    traces = [full_trace(number) for number in range(60)]
    events = [
        *(Label(("doc-1", "doc-9"), trace_id=trace.trace_id) for trace in traces[::3]),
        *(Feedback(trace.trace_id, "thumbs_down", "wrong") for trace in traces[::4]),
        *(EvaluationResult("relevance", 1.0, trace_id=trace.trace_id) for trace in traces[::5]),
    ]
    before = copy.deepcopy((traces, events))
    for detector in detectors:
        detector.start()
    try:
        for trace in traces:
            for detector in detectors:
                detector.observe(trace)
        for event in events:
            for detector in detectors:
                detector.observe_event(event)
    finally:
        for detector in detectors:
            detector.shutdown()
    assert len(detectors) >= 8
    assert (traces, events) == before
