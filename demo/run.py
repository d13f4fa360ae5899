"""``rag-monitor demo``: the sidecar plus a synthetic RAG service with scripted incidents.

The service sends real OTLP/HTTP spans with OpenInference attributes through
the opentelemetry-sdk exporter, so the demo exercises the same path as
production traffic. The timeline cycles through incidents; a live terminal
view (or, without a TTY, a log line every 10 s) shows what the sidecar sees.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from demo.service import (
    ALL_DOCUMENT_TYPES,
    DEFAULT_CYCLE_S,
    INTENTS,
    PROBES_PER_TENANT,
    RATE_PER_S,
    RELEASES,
    SHADOW_SHARE,
    TENANTS,
    Incident,
    SyntheticRagService,
    probe_and_gold,
)
from monitor.config import Config
from monitor.names import REQUESTS_TOTAL

log = structlog.get_logger("rag_monitor.demo")

SUMMARY_EVERY_S = 10.0


def with_demo_settings(config: Config) -> Config:
    """The demo's golden set (unless the config names one), drift windows sized to its
    20 requests/s, so that the incidents show within minutes, the review queue on, and
    its intents and document types sliced (unless the config names intents)."""
    detectors = config.detectors
    filter_exclusion = detectors.filter_exclusion
    if filter_exclusion.golden_set is None:
        path = config.service.state_dir / "demo-golden-set.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for tenant in TENANTS:
            for number in range(PROBES_PER_TENANT):
                probe, gold = probe_and_gold(tenant, number)
                lines.append(json.dumps({"probe_id": probe, "gold_doc_ids": [gold]}))
        path.write_text("\n".join(lines) + "\n")
        filter_exclusion = filter_exclusion.model_copy(update={"golden_set": path})
    drift = detectors.drift.model_copy(
        update={"reference_size": 400, "window_size": 200, "test_every_records": 100}
    )
    # The review loop on (README "Human review"): the demo's text is synthetic, and a
    # larger random share fills the queue within a minute at 20 requests/s.
    review = detectors.review.model_copy(update={"enabled": True, "random_rate": 0.05})
    slices = detectors.slices
    if not slices.intents:
        slices = slices.model_copy(
            update={"intents": list(INTENTS), "document_types": list(ALL_DOCUMENT_TYPES)}
        )
    # The demo's shadow twins are paired (README "Shadow comparison").
    shadow = detectors.shadow.model_copy(update={"enabled": True})
    update = {
        "filter_exclusion": filter_exclusion,
        "drift": drift,
        "review": review,
        "slices": slices,
        "shadow": shadow,
    }
    return config.model_copy(update={"detectors": detectors.model_copy(update=update)})


FETCH_HOW = (
    "run `rag-monitor models fetch` (with the demo's --config, if any) on a machine that "
    "reaches huggingface.co, then start the demo again; it runs on without this detector"
)


def warn_missing_models(config: Config) -> list[str]:
    """Log, per model a detector needs and this machine lacks, the command that fetches it."""
    from monitor.components import load_components

    missing = []
    for component in load_components():
        section = getattr(config.detectors, component.name, None)
        if component.models is None or section is None:
            continue
        for model in component.models.missing(section):
            log.warning(
                "demo_model_missing", detector=component.name, model=model, how_to_fix=FETCH_HOW
            )
            missing.append(model)
    return missing


@dataclass
class Snapshot:
    """What the terminal view shows, read from the sidecar's own registry."""

    requests: float
    requests_per_s: float
    recorded: dict[str, float]  # the recording rules' series over the last interval
    guardrails: dict[str, str]  # each alert's condition: ok, BREACH, no evidence yet, ...


class Summarizer:
    """Evaluates the generated rules (``rag-monitor rules`` for this config) on the
    sidecar's registry over the interval since the last snapshot."""

    def __init__(self, registry: CollectorRegistry, rules: dict[str, Any]) -> None:
        from demo.rule_evaluation import RuleEvaluator

        self._registry = registry
        self._rules = RuleEvaluator(rules, registry)
        self._last_time: float | None = None
        self._last_requests = 0.0

    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        requests = sum(
            sample.value
            for metric in self._registry.collect()
            for sample in metric.samples
            if sample.name == REQUESTS_TOTAL
        )
        elapsed = None if self._last_time is None else max(now - self._last_time, 1e-9)
        per_s = 0.0 if elapsed is None else (requests - self._last_requests) / elapsed
        self._last_requests, self._last_time = requests, now
        recorded, guardrails = self._rules.evaluate()
        return Snapshot(requests, per_s, recorded, guardrails)


def _table(snapshot: Snapshot, incident: Incident | None, version: str) -> Any:
    from rich.table import Table

    caption = f"incident: {incident.name if incident else 'none'}; release: {version}"
    table = Table(title="rag-monitor demo", caption=caption)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{snapshot.requests:.0f} ({snapshot.requests_per_s:.1f}/s)")
    for series, value in snapshot.recorded.items():
        table.add_row(series, f"{value:.4g}")
    for name, state in snapshot.guardrails.items():
        table.add_row(f"alert {name}", state)
    return table


def run_demo(config: Config, duration_s: float | None) -> int:
    """Run the sidecar and the synthetic service until ``duration_s`` or a signal.

    The live view evaluates exactly the conditions ``rag-monitor rules`` generates
    (``alerts.rules.build_rules``), never its own copy.
    """
    from alerts.rules import build_rules
    from monitor.sidecar import Sidecar

    config = with_demo_settings(config)
    warn_missing_models(config)
    try:
        sidecar = Sidecar(config)
    except ValueError as exc:  # e.g. a detector whose extra is not installed
        print(f"invalid configuration: {exc}", file=sys.stderr)
        return 1
    sidecar.start()
    http = config.collectors.otlp.http
    if sidecar.http is None:
        log.error("demo_needs_otlp_http", hint="set collectors.otlp.http.enabled: true")
        sidecar.shutdown()
        return 1
    endpoint = f"http://{http.host}:{sidecar.http.port}/v1/traces"
    service = SyntheticRagService(endpoint, cycle_s=duration_s or DEFAULT_CYCLE_S)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    service.start()
    log.info(
        "demo_started",
        metrics=f"http://{config.service.metrics.host}:{sidecar.metrics_server.port}/metrics",
        rate_per_s=RATE_PER_S,
        duration_s=duration_s,
        releases=f"{RELEASES[0]} -> {RELEASES[1]} when the latency incident starts",
        shadow_share=SHADOW_SHARE,
    )
    summarizer = Summarizer(sidecar.registry, build_rules(config))
    deadline = time.monotonic() + duration_s if duration_s else float("inf")
    try:
        for snapshot in _views(summarizer, stop, deadline, service):
            del snapshot
    finally:
        service.shutdown()
        sidecar.shutdown()
    log.info("demo_stopped", sent=service.sent, shadow_sent=service.shadow_sent)
    return 0


def _views(
    summarizer: Summarizer, stop: threading.Event, deadline: float, service: SyntheticRagService
) -> Iterator[Snapshot]:
    """Refresh the live view (TTY) or log a summary every 10 s until told to stop."""
    if sys.stdout.isatty():
        from rich.live import Live

        with Live(refresh_per_second=2) as live:
            while not stop.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                snapshot = summarizer.snapshot()
                live.update(_table(snapshot, service.current_incident(), service.current_version()))
                yield snapshot
                if time.monotonic() >= deadline:
                    return
        return
    while not stop.wait(min(SUMMARY_EVERY_S, max(0.0, deadline - time.monotonic()))):
        snapshot = summarizer.snapshot()
        incident = service.current_incident()
        log.info(
            "demo_summary",
            requests=snapshot.requests,
            requests_per_s=round(snapshot.requests_per_s, 2),
            recorded={series: round(value, 6) for series, value in snapshot.recorded.items()},
            incident=incident.name if incident else None,
            release=service.current_version(),
            guardrails=snapshot.guardrails,
        )
        yield snapshot
        if time.monotonic() >= deadline:
            return
