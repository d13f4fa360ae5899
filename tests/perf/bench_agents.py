"""Sidecar CPU per span for agent-shaped traces of growing length.

A script, not a pytest test (pytest does not collect ``bench_*.py``)::

    python tests/perf/bench_agents.py                  # 8, 80 and 800 spans a trace
    python tests/perf/bench_agents.py --spans 8 800 --total 40000 --rounds 3

Agent runs are long: a run calls a model, then a tool, then the model again, many times
over, and a few of the tool calls retrieve. Each trace here is an OpenInference AGENT span
(the question in, the answer out) over alternating LLM spans (token counts) and TOOL spans:
three of the tools return five documents as JSON (a retrieval step each, read by
``collectors/spans/tools.py``), every other tool returns a small JSON object (no
evidence). The traces are made by the OpenTelemetry SDK and encoded by its OTLP encoder,
as an SDK exporter would, and sent over OTLP/HTTP into ``python -m monitor run``
(bench_ingest's config and sender processes). Per size and round, the same number of spans
(``--total``) is sent, and the figure is the sidecar process's CPU microseconds per span
from /proc (all threads), until ``rag_requests_total`` counts every trace; the median
round per size is reported, with ``largest_over_smallest``: the largest traces' CPU per
span over the smallest's (1.0: the cost per span does not grow with a trace's length).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.trace import set_span_in_context  # noqa: E402

from tests.conftest import free_port  # noqa: E402
from tests.otel_traffic import MemoryExporter, tracer_for  # noqa: E402
from tests.perf.bench_ingest import (  # noqa: E402
    cpu_times,
    running_sidecar,
    send_all,
    sidecar_config,
    wait_for_count,
)

KIND = "openinference.span.kind"
RETRIEVALS = 3  # tool calls a run makes that retrieve
DOCUMENTS = 5  # documents each retrieval returns
MS = 1_000_000
_WORDS = ("refund", "policy", "invoice", "account", "billing", "period", "customer", "support")
# Spans a body holds at most: bodies of several short traces, or one long trace.
SPANS_PER_BODY = 800


def agent_trace(tracer: Any, spans: int, number: int, rng: random.Random) -> None:
    """One agent run of ``spans`` spans: the AGENT span, then LLM and TOOL spans in turn;
    the first ``RETRIEVALS`` tool calls retrieve."""
    start = 1_700_000_000_000 * MS + number * 10_000 * MS
    run = tracer.start_span(
        "agent_run",
        start_time=start,
        attributes={
            KIND: "AGENT",
            "input.value": f"What is the {rng.choice(_WORDS)} period for order {number}?",
            "output.value": "Thirty days, as the policy says.",
        },
    )
    context = set_span_in_context(run)
    retrievals = 0
    t = start
    for step in range(spans - 1):
        if step % 2 == 0:
            attributes: dict[str, Any] = {
                KIND: "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 400 + step,
                "llm.token_count.completion": 20,
            }
            name = "chat"
        elif retrievals < RETRIEVALS:
            retrievals += 1
            documents = [
                {
                    "id": f"doc-{rng.randrange(10_000)}",
                    "text": " ".join(rng.choice(_WORDS) for _ in range(60)),
                    "score": round(rng.random(), 3),
                    "tenant": f"tenant-{number % 7}",
                }
                for _ in range(DOCUMENTS)
            ]
            attributes = {
                KIND: "TOOL",
                "tool.name": "search_docs",
                "input.value": json.dumps({"query": f"{rng.choice(_WORDS)} period"}),
                "output.value": json.dumps(documents),
            }
            name = "search_docs"
        else:
            attributes = {
                KIND: "TOOL",
                "tool.name": "get_order",
                "input.value": json.dumps({"order": number}),
                "output.value": json.dumps({"order": number, "status": "shipped", "items": 2}),
            }
            name = "get_order"
        tracer.start_span(name, context=context, start_time=t, attributes=attributes).end(
            end_time=t + 5 * MS
        )
        t += 5 * MS
    run.end(end_time=t + MS)


def encode_bodies(spans: int, total: int, seed: int) -> list[bytes]:
    """OTLP protobuf bodies of agent traces of ``spans`` spans, ``total`` spans in all
    (rounded up to whole traces), at most ``SPANS_PER_BODY`` spans a body."""
    rng = random.Random(seed)
    per_body = max(1, SPANS_PER_BODY // spans)
    traces = -(-total // spans)
    bodies = []
    for first in range(0, traces, per_body):
        exporter = MemoryExporter()
        provider, tracer = tracer_for(exporter)
        for number in range(first, min(first + per_body, traces)):
            agent_trace(tracer, spans, seed * 1_000_000 + number, rng)
        provider.shutdown()
        bodies.append(encode_spans(exporter.spans).SerializeToString())
    return bodies


def traces_in(body: bytes) -> int:
    request = ExportTraceServiceRequest.FromString(body)
    return len(
        {span.trace_id for rs in request.resource_spans for ss in rs.scope_spans
         for span in ss.spans}
    )  # fmt: skip


def bench(sizes: Sequence[int], total: int, rounds: int) -> dict[str, Any]:
    """CPU microseconds per span of one sidecar, per trace size, ``rounds`` times, the
    sizes in turn within a round so that each sees the same machine."""
    http_port = free_port()
    config = sidecar_config(http_port=http_port)
    # grace_s 0.1 (bench_ingest's): a run's spans all arrive in one body, root last.
    per_size: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
    with (
        tempfile.TemporaryDirectory() as directory,
        running_sidecar(Path(directory), config, "agents") as sidecar,
    ):
        assert sidecar.process is not None
        sidecar.wait_ready()
        done = 0
        warm_up = encode_bodies(max(sizes), max(sizes), seed=0)
        send_all(http_port, warm_up, 1)
        done += sum(map(traces_in, warm_up))
        wait_for_count(sidecar, done, "rag_requests_total", source="otlp")
        for round_number in range(1, rounds + 1):
            for size in sizes:
                bodies = encode_bodies(size, total, seed=round_number * 100 + size)
                traces = sum(map(traces_in, bodies))
                user_before, system_before = cpu_times(sidecar.process.pid)
                start = time.monotonic()
                send_all(http_port, bodies, 2)
                done += traces
                end = wait_for_count(sidecar, done, "rag_requests_total", source="otlp")
                user, system = cpu_times(sidecar.process.pid)
                cpu = (user - user_before) + (system - system_before)
                spans = traces * size
                per_size[size].append({
                    "traces": traces,
                    "spans": spans,
                    "elapsed_s": round(end - start, 3),
                    "cpu_s": round(cpu, 2),
                    "cpu_us_per_span": round(cpu / spans * 1e6, 2),
                })  # fmt: skip
        errors = sidecar.metric("rag_monitor_detector_errors_total")
        retrieve = sidecar.metric("rag_stage_latency_seconds_count", stage="retrieve")
    medians = {
        size: statistics.median(r["cpu_us_per_span"] for r in results)
        for size, results in per_size.items()
    }
    return {
        "sizes": {
            str(size): {"rounds": results, "cpu_us_per_span": medians[size]}
            for size, results in per_size.items()
        },
        "largest_over_smallest": round(medians[max(sizes)] / medians[min(sizes)], 3),
        "retrieve_stage_observations": retrieve,
        "detector_errors": errors,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[8, 80, 800])
    parser.add_argument("--total", type=int, default=80_000, help="spans sent per size a round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median reported)")
    args = parser.parse_args(argv)
    if min(args.spans) < 2:
        parser.error("--spans: a run has its AGENT span and at least one call")
    result = bench(sorted(args.spans), args.total, args.rounds)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
