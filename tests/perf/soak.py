"""Soak: steady OTLP/HTTP traffic with drift on, watching memory, state size and losses.

A script, not a pytest test (pytest does not collect it)::

    python tests/perf/soak.py                          # 10 minutes at 500 traces/s
    python tests/perf/soak.py --minutes 3 --rate 200   # a quick look
    python tests/perf/soak.py --capacity-share 0.8     # 10 minutes at 80% of capacity

It runs ``python -m monitor run`` with drift on (scipy backend, traced query
vectors of ``--dim`` dimensions) and a small ``service.state_max_bytes``, sends
``--rate`` traces/s of 5-span RAG traces (EMBEDDING, RETRIEVER, RERANKER, LLM
under a CHAIN root) over keep-alive connections, samples the sidecar's RSS,
thread count, state-dir size and series count every ``--every`` seconds, then
stops the sidecar with SIGTERM. It prints one JSON object:

- ``rss_mb``: the samples; ``rss_growth_after_warmup``: last sample over the
  sample at the end of ``--warmup-minutes``, minus 1 (target: within 0.10);
- ``state_bytes_max`` against ``state_max_bytes`` (target: under);
- ``accepted`` (traces in exports answered 200) against ``processed``
  (``rag_requests_total{source="otlp"}`` of the soak phase, before the stop,
  and the drain's count from the ``stopped`` log line); target: equal;
- ``exit_code`` of the SIGTERM (target: 0).

With ``--capacity-share``, the same sidecar first takes unpaced traffic for
``--capacity-s`` seconds; ``capacity_traces_per_s`` is what it processed in
that time (until ``rag_requests_total`` caught up with what it accepted), and
the soak then runs at that share of it. The soak's own warm-up starts after.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402

from tests.conftest import SidecarProcess, free_port, wait_until  # noqa: E402
from tests.otel_traffic import NS, MemoryExporter, RagRequest, emit_rag_request, tracer_for  # noqa: E402

VECTOR_KEY = "embedding.embeddings.0.embedding.vector"
TRACES_PER_REQUEST = 10
BODY_POOL = 200


def body_pool(dim: int, seed: int = 5) -> list[tuple[bytes, list[bytes]]]:
    """Protobuf export bodies of ``TRACES_PER_REQUEST`` traces each, with their trace ids.

    The sender swaps every trace id for a fresh one per request (a byte replace),
    so the pool stays small while every trace the sidecar sees is new.
    """
    rng = random.Random(seed)
    pool = []
    for number in range(BODY_POOL):
        exporter = MemoryExporter()
        provider, tracer = tracer_for(exporter)
        for index in range(TRACES_PER_REQUEST):
            tenant = f"tenant-{index % 7}"
            documents = [(f"doc-{rng.randrange(10_000)}", tenant) for _ in range(5)]
            emit_rag_request(
                tracer,
                RagRequest(start_ns=1_700_000_000 * NS + number * NS, documents=documents),
            )
        provider.shutdown()
        request = encode_spans(exporter.spans)
        trace_ids: set[bytes] = set()
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    trace_ids.add(span.trace_id)
                    for pair in span.attributes:
                        if pair.key == VECTOR_KEY:
                            values = pair.value.array_value.values
                            del values[:]
                            for _ in range(dim):
                                values.add().double_value = rng.gauss(0.0, 1.0)
        pool.append((request.SerializeToString(), sorted(trace_ids)))
    return pool


def _send(port: int, pool: Sequence[tuple[bytes, list[bytes]]], pace: tuple[float, float],
          seed: int, counts: Any) -> None:  # fmt: skip
    """One sender process: ``pace`` = (traces/s, monotonic end) over one keep-alive
    connection; counts the traces in exports answered 200 and the refused exports."""
    rate, stop_at = pace
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/x-protobuf"}
    interval = TRACES_PER_REQUEST / rate
    accepted = refused = 0
    next_send = time.monotonic()
    while time.monotonic() < stop_at:
        body, trace_ids = pool[rng.randrange(len(pool))]
        for trace_id in trace_ids:
            body = body.replace(trace_id, rng.randbytes(16))
        try:
            connection.request("POST", "/v1/traces", body, headers)
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            refused += 1
        else:
            if response.status == 200:
                accepted += TRACES_PER_REQUEST
            else:
                refused += 1
        next_send += interval
        time.sleep(max(0.0, next_send - time.monotonic()))
    counts.put((accepted, refused))


def start_senders(port: int, pool: Sequence[tuple[bytes, list[bytes]]], rate: float,
                  stop_at: float, senders: int, *, seed: int) -> tuple[list[Any], Any]:  # fmt: skip
    """``senders`` processes sharing ``rate`` traces/s (``math.inf``: unpaced) until ``stop_at``.

    Sender *i* draws its trace ids from ``seed + i``: phases given different seeds send
    different traces (a trace id seen before would count as late spans, not as a request).
    """
    context = multiprocessing.get_context("fork")
    counts = context.Queue()
    processes = [
        context.Process(
            target=_send, args=(port, pool, (rate / senders, stop_at), seed + i, counts)
        )
        for i in range(senders)
    ]
    for process in processes:
        process.start()
    return processes, counts


def finish_senders(processes: list[Any], counts: Any) -> tuple[int, int]:
    """Traces accepted and exports refused, over all sender processes."""
    results = [counts.get(timeout=120) for _ in processes]
    for process in processes:
        process.join()
    return sum(a for a, _ in results), sum(r for _, r in results)


def measure_capacity(sidecar: SidecarProcess, port: int, pool: Sequence[tuple[bytes, list[bytes]]],
                     seconds: float, senders: int) -> float:  # fmt: skip
    """Traces/s the sidecar processes under unpaced senders: what it accepted in ``seconds``
    over the time until ``rag_requests_total`` reached it."""
    before = sidecar.metric("rag_requests_total", source="otlp")
    start = time.monotonic()
    processes, counts = start_senders(port, pool, math.inf, start + seconds, senders, seed=1000)
    accepted, _ = finish_senders(processes, counts)
    wait_until(
        lambda: sidecar.metric("rag_requests_total", source="otlp") - before >= accepted,
        timeout=120,
        every=0.1,
    )
    return accepted / (time.monotonic() - start)


def process_sample(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def series_count(sidecar: SidecarProcess) -> int:
    status, body = sidecar.get("/metrics")
    lines = body.decode().splitlines() if status == 200 else []
    return sum(1 for line in lines if line and not line.startswith("#"))


def stopped_line(log_path: Path) -> dict[str, Any] | None:
    for line in reversed(log_path.read_text().splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "stopped":
            return dict(record)
    return None


def soak(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    http_port = free_port()
    state_dir = directory / "state"
    config = {
        "service": {"state_dir": str(state_dir)},
        "collectors": {"otlp": {"http": {"port": http_port}, "grpc": {"enabled": False}}},
        "assembly": {"grace_s": 0.5},
        "detectors": {"faithfulness": {"enabled": False}, "drift": {"backend": "scipy"}},
    }
    if args.state_max_bytes:
        config["service"]["state_max_bytes"] = args.state_max_bytes
    pool = body_pool(args.dim)
    sidecar = SidecarProcess(directory, config, "soak").start()
    assert sidecar.process is not None
    pid = sidecar.process.pid
    sidecar.wait_ready()
    capacity = None
    rate = args.rate
    if args.capacity_share is not None:
        capacity = measure_capacity(sidecar, http_port, pool, args.capacity_s, args.senders)
        rate = args.capacity_share * capacity
    before = sidecar.metric("rag_requests_total", source="otlp")
    start = time.monotonic()
    stop_at = start + args.minutes * 60
    senders, counts = start_senders(http_port, pool, rate, stop_at, args.senders, seed=0)
    samples = []
    while time.monotonic() < stop_at:
        time.sleep(args.every)
        samples.append(
            {
                "t_s": round(time.monotonic() - start),
                **process_sample(pid),
                "state_bytes": directory_bytes(state_dir) if state_dir.exists() else 0,
                "series": series_count(sidecar),
            }
        )
    accepted, refused = finish_senders(senders, counts)
    # Let the pipeline finish what it accepted before reading its count.
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: sidecar.metric("rag_requests_total", source="otlp") - before >= accepted,
            timeout=60,
        )
    processed = sidecar.metric("rag_requests_total", source="otlp") - before
    stop_started = time.monotonic()
    exit_code = sidecar.stop()
    stop_s = time.monotonic() - stop_started
    warm = [s for s in samples if s["t_s"] >= args.warmup_minutes * 60]
    rss_mb = [round(s["rss_kb"] / 1024, 1) for s in samples]
    return {
        "minutes": args.minutes,
        "capacity_traces_per_s": round(capacity, 1) if capacity is not None else None,
        "rate_traces_per_s": round(rate, 1),
        "dim": args.dim,
        "samples": samples,
        "rss_mb": rss_mb,
        "rss_growth_after_warmup": round(warm[-1]["rss_kb"] / warm[0]["rss_kb"] - 1, 3)
        if warm
        else None,
        "state_max_bytes": args.state_max_bytes,
        "state_bytes_max": max(s["state_bytes"] for s in samples),
        "accepted": accepted,
        "refused_exports": refused,
        "processed": processed,
        "stopped_line": stopped_line(sidecar.log_path),
        "exit_code": exit_code,
        "stop_s": round(stop_s, 1),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=500.0, help="traces per second")
    parser.add_argument("--dim", type=int, default=384, help="query vector dimensions")
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup-minutes", type=float, default=2.0)
    parser.add_argument(
        "--capacity-share",
        type=float,
        default=None,
        help="soak at this share of the capacity measured first (instead of --rate)",
    )
    parser.add_argument(
        "--capacity-s", type=float, default=30.0, help="seconds of unpaced traffic to measure it"
    )
    parser.add_argument(
        "--state-max-bytes", type=int, default=64 * 1024 * 1024, help="0: the sidecar's default"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        figures = soak(args, Path(tmp))
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
