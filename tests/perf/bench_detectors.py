"""Benchmark: RagTrace records per second through the latency, cost and feedback detectors alone.

Prints JSON. Run: python tests/perf/bench_detectors.py [--records N]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime, timedelta

from detectors.cost.config import CostConfig
from detectors.cost.detector import CostDetector
from detectors.feedback.detector import FeedbackDetector
from detectors.latency.config import LatencyConfig
from detectors.latency.detector import LatencyDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace, Usage

MODELS = (("gpt-4o-mini", "openai"), ("gpt-4o", "openai"), ("claude-sonnet-4-5", "anthropic"))


def make_traces(count: int, seed: int = 1) -> list[RagTrace]:
    rng = random.Random(seed)
    start = datetime(2026, 12, 2, tzinfo=UTC)
    traces = []
    for i in range(count):
        model, provider = rng.choice(MODELS)
        stages = {
            "embed": rng.lognormvariate(-4.5, 0.3),
            "retrieve": rng.lognormvariate(-2.7, 0.4),
            "rerank": rng.lognormvariate(-3.2, 0.3),
            "generate": rng.lognormvariate(-0.6, 0.35),
            "ttft": rng.lognormvariate(-1.5, 0.3),
        }
        stages["total"] = sum(v for k, v in stages.items() if k != "ttft")
        traces.append(
            RagTrace(
                trace_id=f"{i:032x}",
                time=start + timedelta(milliseconds=50 * i),
                source="kafka",
                session_id=f"s{rng.randrange(2000)}",
                query=f"question {rng.randrange(5000)}",
                stages=stages,
                usage=(
                    Usage("text-embedding-3-small", "openai", embedding_tokens=rng.randint(8, 40)),
                    Usage(model, provider, rng.randint(600, 1500), rng.randint(60, 300)),
                ),
            )
        )
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    traces = make_traces(args.records)
    registry = SidecarRegistry()
    detectors = [
        LatencyDetector(LatencyConfig(), registry),
        CostDetector(CostConfig(), registry),
        FeedbackDetector(registry),
    ]
    for trace in traces[:1000]:  # warm the price cache
        for detector in detectors:
            detector.observe(trace)
    figures = {}
    for detector in detectors:
        started = time.perf_counter()
        for trace in traces:
            detector.observe(trace)
        figures[f"{detector.name}_records_per_s"] = round(
            len(traces) / (time.perf_counter() - started)
        )
    started = time.perf_counter()
    for trace in traces:
        for detector in detectors:
            detector.observe(trace)
    elapsed = time.perf_counter() - started
    figures["all_three_records_per_s"] = round(len(traces) / elapsed)
    figures["records"] = len(traces)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
