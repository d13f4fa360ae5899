"""``rag-monitor score [--config F]``: run a scorer until SIGTERM or SIGINT.

It reads the same configuration file as the sidecars: ``detectors.faithfulness`` (the
judge, its settings, ``remote``), ``collectors.kafka`` (brokers, security, consumer
tuning) and ``service.metrics`` (where its /metrics, /healthz and /readyz are served).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

from monitor.contract.command import Command
from monitor.contract.sidecar_registry import SidecarRegistry

if TYPE_CHECKING:  # kafka and the HTTP server load when the command runs, not for --help
    from detectors.faithfulness.scorer import Scorer
    from monitor.contract.config import Config
    from monitor.contract.http.endpoints import MetricsServer

# Exit codes: 1 the configuration cannot run a scorer, 3 the judge cannot load here.
NO_JUDGE = 3
NO_KAFKA = "set collectors.kafka.bootstrap_servers"


def _arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # --config only


def _score(args: argparse.Namespace, config: Config) -> int:
    del args
    import structlog

    from detectors.faithfulness.judge_choice import open_judge
    from detectors.faithfulness.local_judge import require_local_judge_extra
    from monitor.contract.config import kafka_connection
    from monitor.contract.extras import MissingExtraError

    log = structlog.get_logger("rag_monitor.scorer")
    faithfulness = config.detectors.faithfulness
    if kafka_connection(config) is None:
        print(f"rag-monitor score: {NO_KAFKA}", file=sys.stderr)
        return 1
    try:  # judge: hhem or token_classifier, or a cascade's first judge
        require_local_judge_extra(faithfulness, "set judge: openai_compatible")
    except MissingExtraError as exc:
        print(f"rag-monitor score: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    registry = SidecarRegistry()
    scorer, server = _assemble(config, registry)
    server.start()
    try:
        judge = open_judge(faithfulness, registry=registry, on_stats=scorer.on_stats, stopping=stop)
    except Exception as exc:  # missing model, missing key, a cancelled calibration
        log.warning("scorer_judge_unavailable", judge=faithfulness.judge, error=str(exc))
        server.shutdown()
        return NO_JUDGE
    log.info("scorer_started", judge=judge.name, topic=faithfulness.remote.requests_topic)
    try:
        scorer.run(judge, stop)
    finally:
        judge.close()
        server.shutdown()
    log.info("scorer_stopped")
    return 0


def _assemble(config: Config, registry: SidecarRegistry) -> tuple[Scorer, MetricsServer]:
    """The scorer and its /metrics server on ``registry``, neither started; the judge's own
    families are declared when it loads (the component's ``late_metrics``)."""
    from detectors.faithfulness.scorer import Scorer
    from monitor.contract.config import kafka_connection, shared_values
    from monitor.contract.http.endpoints import MetricsServer, Readiness
    from monitor.contract.shared import SLICER

    kafka = kafka_connection(config)
    if kafka is None:
        raise ValueError(NO_KAFKA)
    # The sidecars' slices: a pair's are checked against the same allow-lists.
    slicer = shared_values(config)[SLICER]
    scorer = Scorer(config.detectors.faithfulness, kafka, registry, slicer)
    readiness = Readiness()
    readiness.add("scorer", scorer.ready.is_set)
    metrics = config.service.metrics
    server = MetricsServer(
        metrics.host, metrics.port, registry, readiness, health=registry.supervisor.failing
    )
    return scorer, server


def _declare(config: Config, registry: SidecarRegistry) -> None:
    """What `rag-monitor score` declares before its judge loads (the metrics reference)."""
    _assemble(config, registry)


SCORE = Command(
    ("score",),
    "run a scorer: judge the pairs sidecars publish (judge_location: kafka), export and "
    "publish the scores",
    _arguments,
    _score,
    metrics=_declare,
    detector="faithfulness",
)
