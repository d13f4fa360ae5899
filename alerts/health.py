"""The sidecar's own share of the rules and the dashboard: is it scraped, does it
dead-letter records or shed samples, are its workers alive. Components add the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import (
    KAFKA_LAG_RECORDS,
    QUEUE_DEPTH,
    RECORDS_TOTAL,
    REFUSED_SPANS_TOTAL,
    SAMPLES_TOTAL,
    STATE_BYTES,
    STATE_MAX_BYTES,
    WORKER_UP,
)
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import JOB, alert, panel_rate, sum_increase

PROMTOOL_TESTS = [Path(__file__).parent / "tests" / "monitor_test.yaml"]


def rules(guardrails: GuardrailsConfig) -> RuleFragment:
    """RagMonitorDown, RagMonitorDeadLetters, RagMonitorSheddingSamples, RagMonitorWorkerDown,
    RagMonitorStateNearFull, RagMonitorTraceTooLarge. None has a ``suspected_cause``:
    their cause is the sidecar or its intake, not a release or drift of the RAG service."""
    window = guardrails.window
    up = f'up{{job="{guardrails.job}"}}'
    # skipped: a poison record that could not even be dead-lettered as a reference
    dead = f'{RECORDS_TOTAL}{{outcome=~"dead_lettered|skipped"}}'
    dropped = f'{SAMPLES_TOTAL}{{outcome="dropped"}}'
    alerts = [
        alert(
            guardrails,
            "RagMonitorDown",
            f"{up} == 0\nor\nabsent({up})",
            severity="page",
            suspected_cause=False,
            summary="rag-monitor is not scraped ({{ $labels.job }})",
            description="Prometheus cannot scrape the rag-monitor sidecar"
            "{{ with $labels.instance }} {{ . }}{{ end }}, or has no target for it: every other "
            "RAG alert, the entitlement alarm included, is blind meanwhile.",
        ),
        alert(
            guardrails,
            "RagMonitorDeadLetters",
            f"{sum_increase(dead, window, 'job, collector')} > 0",
            severity="ticket",
            suspected_cause=False,
            summary="rag-monitor dead-lettered records ({{ $labels.job }}, "
            "{{ $labels.collector }})",
            description='{{ $value | printf "%.0f" }} record(s) from the {{ $labels.collector }} '
            f"collector could not be decoded in the last {window} and went to the dead "
            "letters (or, where even that failed, were skipped and logged); the traces in them "
            "are missing from every metric.",
            for_="0s",
        ),
        alert(
            guardrails,
            "RagMonitorSheddingSamples",
            f"{sum_increase(dropped, window, 'job, detector')} > 0",
            severity="ticket",
            suspected_cause=False,
            summary="rag-monitor sheds samples of the {{ $labels.detector }} detector "
            "({{ $labels.job }})",
            description='{{ $value | printf "%.0f" }} sampled trace(s) for '
            f"{{{{ $labels.detector }}}} were dropped in the last {window} because its "
            "queue was full; its metrics rest on a smaller sample than configured.",
        ),
        alert(
            guardrails,
            "RagMonitorWorkerDown",
            f"{WORKER_UP} == 0",  # exported by monitor.contract.worker's Supervisor
            severity="page",
            suspected_cause=False,
            summary="rag-monitor worker {{ $labels.worker }} died or stalled ({{ $labels.job }})",
            description="The {{ $labels.worker }} thread of {{ $labels.instance }} died or "
            "stopped beating its heartbeat, and /healthz answers 503; the signals it feeds "
            "are missing meanwhile.",
        ),
        *_bound_alerts(guardrails),
    ]
    return RuleFragment(alerting=alerts, promtool_tests=PROMTOOL_TESTS)


def _bound_alerts(guardrails: GuardrailsConfig) -> list[dict[str, Any]]:
    """A bound the sidecar keeps is reached: its state budget, spans per trace."""
    refused, window = REFUSED_SPANS_TOTAL, guardrails.window
    return [
        alert(
            guardrails,
            "RagMonitorStateNearFull",
            # exported by monitor.contract.state: bytes per file of state_dir, and the budget
            f"sum by (job, instance) ({STATE_BYTES})\n> on (job, instance)\n"
            f"0.9 * max by (job, instance) ({STATE_MAX_BYTES})",
            severity="ticket",
            suspected_cause=False,
            summary="rag-monitor state_dir is over 90% of its budget ({{ $labels.job }})",
            description="service.state_dir of {{ $labels.instance }} holds "
            "{{ $value | humanize1024 }}B, over 90% of service.state_max_bytes: the drift store "
            "prunes itself at 85%, so something else fills the directory (a moved-aside corrupt "
            "file, another file, or a reference larger than the budget). Its history is cut "
            "meanwhile; raise the budget or clean the directory before the disk fills.",
        ),
        alert(
            guardrails,
            "RagMonitorTraceTooLarge",
            f"{sum_increase(refused, window, 'job, collector')} > 0",
            severity="ticket",
            suspected_cause=False,
            summary="rag-monitor refused spans of oversized traces ({{ $labels.job }}, "
            "{{ $labels.collector }})",
            description='{{ $value | printf "%.0f" }} span(s) from the {{ $labels.collector }} '
            f"collector were refused in the last {window} because their trace already held "
            "collectors.spans.assembly.max_spans_per_trace spans; a producer sends runaway "
            "traces (an agent loop, mis-nested instrumentation). Those traces are measured on "
            "a part of them.",
            for_="0s",
        ),
    ]


def rows() -> list[Row]:
    """Records by outcome, queue depth, samples shed, dead letters and Kafka lag."""
    dead_lettered = panel_rate(RECORDS_TOTAL, 'outcome="dead_lettered"')
    panels = [
        Panel(
            "Records by outcome",
            [
                (
                    panel_rate(RECORDS_TOTAL, by="collector, outcome"),
                    "{{collector}} {{outcome}}",
                )
            ],
            unit="ops",
            width=6,
        ),
        Panel(
            "Queue depth",
            [
                (
                    f"max by (instance, queue) ({QUEUE_DEPTH}{{{JOB}}})",
                    "{{instance}} {{queue}}",
                )
            ],
            width=6,
        ),
        Panel(
            "Samples shed",
            [
                (
                    panel_rate(SAMPLES_TOTAL, by="detector, outcome"),
                    "{{detector}} {{outcome}}",
                )
            ],
            unit="ops",
            width=6,
        ),
        Panel(
            "Dead-letter rate and Kafka lag",
            [
                (dead_lettered, "dead-lettered/s"),
                # Per partition, so that one stalled partition shows; its owner reports it.
                (
                    f"max by (topic, partition) ({KAFKA_LAG_RECORDS}{{{JOB}}})",
                    "lag {{topic}}/{{partition}}",
                ),
            ],
            width=6,
        ),
    ]
    return [Row("Sidecar health", panels)]
