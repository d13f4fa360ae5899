"""Benchmark: CPU per trace to decode and map SDK traces that carry a query vector.

The soak's traffic (2,000 shared SDK traces of 5 spans, the EMBEDDING span's vector of
``--dim`` numbers) is decoded from OTLP protobuf and mapped to ``RagTrace`` values in
this process, once with vectors decoded as a whole (collectors/otlp/double_arrays.py)
and once element by element (the path every array took before). Prints JSON:
microseconds of CPU per trace for each, best of ``--rounds``.

Run: python tests/perf/bench_vectors.py [--dim 1536]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collectors.otlp import double_arrays
from collectors.otlp.decode import decode_otlp_proto
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from tests.perf.soak import body_pool


def by_trace(spans: list[Span]) -> list[list[Span]]:
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return list(traces.values())


def cpu_per_trace_us(bodies: list[bytes], traces: int, rounds: int) -> float:
    mapper = TraceMapper()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for body in bodies:
            for spans in by_trace(decode_otlp_proto(body).spans):
                trace = mapper.build(spans, "otlp")
                if trace is None or trace.query_embedding is None:
                    raise SystemExit("a trace lost its query vector")
        best = min(best, time.process_time() - started)
    return round(best / traces * 1e6, 1)


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dim", type=int, default=1536, help="numbers per query vector")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pool = body_pool(args.dim)  # the soak's traffic: 5-span SDK traces, 10 a request
    bodies = [body for body, _ in pool]
    traces = sum(len(trace_ids) for _, trace_ids in pool)
    whole = cpu_per_trace_us(bodies, traces, args.rounds)
    with mock.patch.object(double_arrays, "MIN_ELEMENTS", sys.maxsize):
        element_wise = cpu_per_trace_us(bodies, traces, args.rounds)
    figures = {
        "dim": args.dim,
        "traces": traces,
        "us_cpu_per_trace_whole": whole,
        "us_cpu_per_trace_element_wise": element_wise,
        "speed_up": round(element_wise / whole, 2),
    }
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
