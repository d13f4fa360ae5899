"""What stalled request bodies cost a sidecar, with the bytes-in-flight budget and without.

A script, not a pytest test::

    python tests/perf/probe_inflight.py                     # 200 x 1 MiB bodies, 16 MiB budget
    python tests/perf/probe_inflight.py --budget-mib 1024   # a budget that never binds
    python tests/perf/probe_inflight.py --decode            # decoding's memory per body byte

It starts ``python -m monitor run`` with ``max_request_bytes`` = ``--body-kib`` and
``max_inflight_bytes`` = ``--budget-mib``, opens ``--clients`` connections that each send
all but 64 KiB of a body of ``max_request_bytes`` and stall, and prints one JSON object:
the sidecar's RSS before and with the stalled clients (``/proc/<pid>/status``), how many
were refused at once (503), the bytes the budget reserved, and how long a normal export
waited to be answered 200 (it retries 503s after their Retry-After).

``--decode`` instead measures, in this process, what decoding holds per byte of body:
the parsed ``ExportTraceServiceRequest`` (OTLP/JSON: the parsed document) and the
decoded spans, for bench_ingest's document-carrying requests (protobuf and JSON) and
for requests of many small spans
(``monitor.contract.inflight.OTLP_DECODE_FACTOR`` is taken from these).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

from collectors.otlp.decode import decode_otlp_json, decode_otlp_proto  # noqa: E402
from tests.conftest import SidecarProcess, to_otlp_json  # noqa: E402
from tests.integration.conftest import otlp_http_port  # noqa: E402
from tests.integration.test_http_limits import (  # noqa: E402
    QUIET,
    answered,
    normal_export,
    rss_bytes,
    stall_bodies,
)
from tests.perf.bench_ingest import encode_requests  # noqa: E402


def probe_stalled(clients: int, body_kib: int, budget_mib: int) -> dict[str, Any]:
    body, budget = body_kib * 1024, budget_mib * 2**20
    with tempfile.TemporaryDirectory() as directory:
        sidecar = SidecarProcess(
            Path(directory),
            {
                "collectors": {
                    "otlp": {
                        "http": {"max_connections": clients + 20, "body_timeout_s": 10},
                        "grpc": {"enabled": False},
                        "max_request_bytes": body,
                        "max_inflight_bytes": budget,
                    }
                },
                "detectors": QUIET,
            },
        ).start()
        try:
            sidecar.wait_ready()
            port = otlp_http_port(sidecar)
            assert sidecar.process is not None
            pid = sidecar.process.pid
            normal_export(port)
            before = rss_bytes(pid)
            stalled = stall_bodies(port, clients, body, body - 2**16)
            time.sleep(1)
            during = rss_bytes(pid)
            refused = len(answered(stalled))
            reserved = sidecar.metric("rag_monitor_inflight_bytes", budget="otlp")
            began, status = time.monotonic(), 0
            while status != 200 and time.monotonic() - began < 30:
                status = normal_export(port)
                if status != 200:
                    time.sleep(1)
            waited = time.monotonic() - began
            for client in stalled:
                client.close()
        finally:
            sidecar.stop()
    return {
        "clients": clients,
        "body_bytes": body,
        "budget_bytes": budget,
        "sent_per_client": body - 2**16,
        "rss_before_mib": round(before / 2**20, 1),
        "rss_stalled_mib": round(during / 2**20, 1),
        "rss_growth_mib": round((during - before) / 2**20, 1),
        "refused_at_once": refused,
        "reserved_bytes": int(reserved),
        "normal_export_status": status,
        "normal_export_waited_s": round(waited, 1),
    }


def small_spans_request(spans: int = 2000) -> bytes:
    """Spans of eight integer attributes each: many small messages, the costly shape."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(spans):
        span = scope.spans.add(
            trace_id=(i // 4 + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big")
        )
        span.name, span.start_time_unix_nano, span.end_time_unix_nano = "s", 1_000, 2_000
        for k in range(8):
            span.attributes.add(key=f"k{k}").value.int_value = k
    return bytes(request.SerializeToString())


def _held(shape: str, what: str) -> float:
    """Bytes held per body byte when 64 MiB of bodies are parsed or decoded and kept."""
    body = small_spans_request() if shape == "small_spans" else encode_requests(128, 512)[0]
    decode: Callable[[bytes], object] = decode_otlp_proto
    if shape == "documents_json":
        body, decode = to_otlp_json(body), decode_otlp_json
    if what == "parsed":
        decode = orjson.loads if shape == "documents_json" else ExportTraceServiceRequest.FromString
    copies = [bytes(bytearray(body)) for _ in range(max(1, (64 << 20) // len(body)))]
    gc.collect()
    before = rss_bytes(os.getpid())
    kept = [decode(copy) for copy in copies]
    gc.collect()
    held = (rss_bytes(os.getpid()) - before) / (len(copies) * len(body))
    del kept
    return round(held, 2)


def probe_decode() -> dict[str, Any]:
    """Each figure in a fresh process: the allocator keeps what an earlier one freed."""
    figures: dict[str, Any] = {}
    for shape in ("documents", "documents_json", "small_spans"):
        for what in ("parsed", "decoded"):
            out = subprocess.run(
                [sys.executable, __file__, "--held", shape, what],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            figures[f"{shape}_{what}_per_body_byte"] = float(out)
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--body-kib", type=int, default=1024)
    parser.add_argument("--budget-mib", type=int, default=16)
    parser.add_argument("--decode", action="store_true", help="measure decoding's memory")
    parser.add_argument("--held", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.held:
        print(_held(*args.held))
        return {}
    if args.decode:
        result = probe_decode()
    else:
        result = probe_stalled(args.clients, args.body_kib, args.budget_mib)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
