"""The toy collector: tails a file of finished requests, one JSON object a line (the fields
of ``RagTrace``: ``trace_id``, ``time``, ``query``, ``answer``, ``contexts``, ...), into the
pipeline. Its settings are ``collectors.toy_file``; its own metric counts the lines it
read. Like any third-party component it imports only the core's contract
(``monitor.contract``)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from prometheus_client import Counter
from pydantic import Field, ValidationError

from monitor.contract.components import CollectorComponent, CollectorContext, Receiver
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.work_items import Consumer, WholeTrace
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.section import Section
from monitor.contract.trace import RagTrace

LINES_TOTAL = "rag_toy_file_lines_total"


class ToyFileConfig(Section):
    path: Path | None = Field(None, description="the file to tail; off until this is set")
    poll_s: float = Field(0.2, gt=0, description="look for new lines this often")


class ToyFileReceiver:
    """Reads the lines appended to the file on its own thread."""

    port = None  # a client: it listens on no port
    max_connections = 0

    def __init__(self, path: Path, poll_s: float, consumer: Consumer) -> None:
        self._path = path
        self._poll_s = poll_s
        self._consumer = consumer
        self._lines = Counter(
            LINES_TOTAL.removesuffix("_total"),
            "Lines the toy collector read, by outcome.",
            ["outcome"],
            registry=consumer.metrics.registry,
        )
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toy-file", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def ready(self) -> bool:
        return self._thread.is_alive()

    def stop_intake(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def shutdown(self) -> None:
        self.stop_intake()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            if self._path.exists():
                self._read_new_lines()

    def _read_new_lines(self) -> None:
        with self._path.open("rb") as file:
            file.seek(self._offset)
            for line in file:
                if not line.endswith(b"\n"):
                    break  # a line still being written: read it whole next time
                self._offset += len(line)
                trace = _request(line)
                if trace is None:
                    self._lines.labels("invalid").inc()
                    continue
                self._consumer.submit(WholeTrace(trace), timeout=2.0)
                self._lines.labels("ok").inc()


def _request(line: bytes) -> RagTrace | None:
    """The request a line holds, validated as the contract's ``RagTrace``; None for a line
    that is no JSON object or not a valid request (counted, never raised)."""
    try:
        fields: Any = json.loads(line)
        if not isinstance(fields, dict):
            return None
        return RagTrace(**{**fields, "source": "otlp"})
    except (ValueError, TypeError, ValidationError):
        return None


def build(config: ToyFileConfig, context: CollectorContext) -> Receiver | None:
    if config.path is None:
        return None
    return ToyFileReceiver(config.path, config.poll_s, context.consumer)


def rules(config: ToyFileConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    invalid = f'{LINES_TOTAL}{{outcome="invalid"}}'
    return RuleFragment(
        alerting=[
            {
                "alert": "RagToyFileInvalidLines",
                "expr": f"sum by (job) (increase({invalid}[{guardrails.window}])) > 0",
                "labels": {"severity": "ticket"},
                "annotations": {"summary": "The toy collector read lines it could not decode"},
            }
        ]
    )


def rows(config: ToyFileConfig, guardrails: GuardrailsConfig) -> list[Row]:
    query = f"sum by (outcome) (rate({LINES_TOTAL}[{guardrails.window}]))"
    return [Row("Toy file", [Panel("Toy file lines per second", [(query, "{{outcome}}")])])]


COMPONENT = CollectorComponent(
    name="toy_file",
    config_model=ToyFileConfig,
    description="the toy collector of the architecture guide",
    build=build,
    rules=rules,
    rows=rows,
    order=1000,
)
