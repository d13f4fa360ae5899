"""Every panel query of the Grafana dashboard returns data from a real Prometheus after traffic."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from alerts.dashboard import build_dashboard, panel_queries
from alerts.guardrail_row import ALERTS_TITLE
from alerts.rules import render_rules
from detectors.review.model import Verdict
from monitor.runtime.sidecar import Sidecar
from tests.conftest import PROBES, golden_set_lines, sample, unique, wait_until
from tests.hhem_checkpoint import build_checkpoint
from tests.integration.conftest import (
    JOB,
    Broker,
    Services,
    SteadyTraffic,
    kafka_settings,
    post,
    probe_request,
    query_series,
    rag_trace,
    review_detector,
    store_of,
    with_test_window,
)
from tests.otel_traffic import RagRequest

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
# What Grafana puts in for the dashboard's variables.
VARIABLES = {"$job": JOB, "$variant": "production", "$__rate_interval": "30s"}
REFERENCE_SIZE, WINDOW_SIZE = 40, 30
DRIFT = {
    "backend": "scipy",
    "reference_size": REFERENCE_SIZE,
    "window_size": WINDOW_SIZE,
    "test_every_records": WINDOW_SIZE,
    "n_permutations": 50,
}
DIMENSIONS = 3  # the size of the EMBEDDING span's vector in otel_traffic
TTFT_S = 0.3
INTENTS = ["refunds", "billing"]  # detectors.slices.intents
EVALUATION = "answer_relevancy"  # detectors.evaluations.evaluations
DOCUMENT_TYPE = "application/pdf"


def grafana_expr(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def kafka_records(count: int, rng: random.Random) -> list[bytes]:
    """rag-trace/1 records with random query vectors, a TTFT stage and no usage (unpriced)."""
    stages = {"retrieve": 0.05, "generate": 0.5, "ttft": 0.2, "total": 0.6}
    return [
        rag_trace(
            query_embedding=[rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS)],
            stages=stages,
            session_id="kafka",
            query="how do refunds work?",
        )
        for _ in range(count)
    ]


def sliced(request: RagRequest, intent: str) -> RagRequest:
    """``request`` with ``rag.intent`` and a document type on each of its documents."""
    metadata = {
        doc_id: {**request.doc_metadata.get(doc_id, {}), "file_type": DOCUMENT_TYPE}
        for doc_id, _ in request.documents
    }
    extra = {**request.extra, "rag.intent": intent}
    return replace(request, extra=extra, doc_metadata=metadata)


def shadow_twins(start: int) -> list[RagRequest]:
    """Probe q2 replayed by production and by its shadow twin (one pair id): the shadow is
    slower in generate and loses the gold document d4 to its relevance filter."""
    production = probe_request(PROBES[1], start)
    extra = {**production.extra, "rag.pair_id": f"p{start}"}
    production = replace(production, extra=extra, cost_usd=0.002)
    shadow = replace(
        production,
        generate_s=production.generate_s + 0.12,
        cost_usd=0.0015,
        documents=[d for d in production.documents if d[0] != "d4"],
        extra={
            **production.extra,
            "rag.variant": "shadow",
            "rag.filter.relevance_excluded": ["d4"],
        },
    )
    return [production, shadow]


def otlp_requests() -> list[RagRequest]:
    """Every golden probe, a leak, an unpriced model, a plain request with an evaluator's
    verdict and a shadow twin, an agent's tool call, all with TTFT, an intent and document
    types.

    Every request asks the same question, so each gets a session of its own but the plain
    request, re-asked every round in session s1: one regeneration a round. With every
    request a re-ask the regeneration share sat at 1, where the extrapolation of
    ``increase()`` could put the band's centre above 1 and its width at NaN.
    """
    start = time.time_ns()
    round_ = [probe_request(probe, start) for probe in PROBES]
    round_.append(probe_request(None, start))
    round_.append(RagRequest(start_ns=start, model="no-such-model-anywhere"))
    round_.append(RagRequest(start_ns=start, extra={"rag.variant": "shadow"}))
    round_ += shadow_twins(start)
    round_ = [
        replace(request, extra={"session.id": f"s{start}-{i}", **request.extra})
        for i, request in enumerate(round_)
    ]
    # an evaluator's verdict on the plain request, as an OpenInference annotation
    judged = {"annotations.0.annotation.name": EVALUATION, "annotations.0.annotation.score": 0.9}
    round_.append(RagRequest(start_ns=start, extra=judged))
    # an agent's tool call that is no retrieval (the tool panel of field coverage)
    tool = ("get_order", '{"status": "shipped"}')
    round_.append(
        RagRequest(start_ns=start, extra={"session.id": f"s{start}-agent"}, tools=(tool,))
    )
    intents = [INTENTS[i % len(INTENTS)] for i in range(len(round_))]
    return [
        sliced(replace(request, ttft_s=TTFT_S), intent)
        for request, intent in zip(round_, intents, strict=True)
    ]


def has_data(prometheus: str, promql: str) -> bool:
    return any(not math.isnan(v) for v in query_series(prometheus, promql).values())


def reviewed_at_random(sidecar: Sidecar) -> bool:
    """A reviewer says yes to each unreviewed random-stratum item a judge has judged (the
    faithfulness judge scored it, or it carries the evaluation's verdict), as the review
    page records a verdict; True once the reviews rest on both judges: a reviewed item the
    faithfulness judge scored and one with the evaluation's outcome. Not one item with
    both: the faithfulness judge samples within its budget and may never score the one
    request a round that carries the evaluation's verdict."""
    detector, store = review_detector(sidecar), store_of(sidecar)
    waiting: list[str] = []  # not drawn at random, or not judged yet
    while (item := store.next_unreviewed(waiting)) is not None:
        if "random" not in item.strata or (item.hhem_score is None and not item.evaluations):
            waiting.append(item.trace_id)
            continue
        verdict = Verdict(item.trace_id, "yes")
        recorded = store.record(verdict)
        assert recorded is not None
        detector.on_verdict(recorded, verdict)
    reviewed = [item for item, _ in store.reviewed()]
    return any(item.evaluations for item in reviewed) and any(
        item.hhem_score is not None for item in reviewed
    )


def review_state(sidecar: Sidecar) -> str:
    """What the review queue holds, for a failure's message."""
    store = store_of(sidecar)
    reviewed = [item for item, _ in store.reviewed()]
    skipped = {
        reason: sample(
            sidecar.registry, "rag_review_skipped_total", stratum="random", reason=reason
        )
        for reason in ("max_per_hour", "expired", "queue_full")
    }
    return (
        f"{store.count()} queued, {len(reviewed)} reviewed, "
        f"{sum(bool(item.evaluations) for item in reviewed)} with the evaluation's outcome, "
        f"{sum(item.hhem_score is not None for item in reviewed)} scored; random skipped {skipped}"
    )


def dwell_reported(sidecar: Sidecar) -> bool:
    """Report one dwell time (the dwell panel's rate needs observations between scrapes)."""
    dwell = b'{"trace_id": "t1", "kind": "dwell", "dwell_seconds": 12.5}'
    return post(sidecar, "/v1/feedback", dwell, "application/json")[0] == 200


def test_every_panel_query_returns_data_after_traffic(
    broker: Broker, start_sidecar: StartSidecar, services: Services, tmp_path: Path
) -> None:
    """Each query of each panel and the release annotation, with Grafana's variables
    filled in, returns a series."""
    checkpoint, _ = build_checkpoint(tmp_path / "hhem")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(golden_set_lines())
    topic = broker.create_topic(unique("traces"))
    shadow_topics = {
        "halves_topic": broker.create_topic(unique("shadow-halves")),
        "pairs_topic": broker.create_topic(unique("shadow-pairs")),
        "group_id": unique("shadow"),
    }
    sidecar = start_sidecar(
        service={"state_dir": str(tmp_path / "state")},
        collectors={"kafka": kafka_settings(broker.bootstrap, [topic])},
        detectors={
            "faithfulness": {
                "model": str(checkpoint),
                "sample_rate": 1.0,
                "max_per_second": 1000,
                "precision": "fp32",
            },
            "filter_exclusion": {"golden_set": str(golden)},
            "drift": DRIFT,
            "shadow": {"enabled": True, "pair_ttl_s": 5, "settle_s": 2, **shadow_topics},
            "evaluations": {
                "evaluations": {EVALUATION: {"score_min": 0.7, "compare_with_review": True}}
            },
            "slices": {"intents": INTENTS, "document_types": [DOCUMENT_TYPE]},
            # every OTLP request is queued for review within the random stratum's bound:
            # its bucket saves five minutes of max_per_hour, 400 items, then takes one every
            # 0.75 s, so reviews with the evaluation's outcome (one request in ten) keep
            # coming however slow the run. At 480 (40 saved, then one every 7.5 s) a CI
            # run ended its 180 s with the corrected shares' panels still empty.
            "review": {
                "enabled": True,
                "random_rate": 1.0,
                "max_per_hour": {"random": 4800},
                "http": {"port": 0},
            },
        },
    )
    registry = sidecar.registry
    config = with_test_window(sidecar.config)
    prometheus = services.start_prometheus(sidecar, render_rules(config))
    dashboard = build_dashboard(config)
    annotations = [(a["name"], a["expr"]) for a in dashboard["annotations"]["list"]]
    # The firing-alerts table lists what fires: empty on this healthy traffic, by design.
    queries = [
        (title, grafana_expr(expr))
        for title, expr in [*panel_queries(dashboard), *annotations]
        if title != ALERTS_TITLE
    ]
    assert not [expr for _, expr in queries if "$" in expr]

    # Kafka first: the drift reference must be random vectors, not the OTLP spans' constant one.
    rng = random.Random(5)
    size = REFERENCE_SIZE + WINDOW_SIZE
    broker.produce(topic, [*kafka_records(size, rng), rng.randbytes(64)])
    wait_until(
        lambda: (
            sample(registry, "rag_drift_reference_vectors", signal="query_embedding")
            == REFERENCE_SIZE
        ),
        timeout=60,
        every=0.2,
    )
    wait_until(
        lambda: sample(registry, "rag_monitor_detector_up", detector="faithfulness") == 1, 60
    )

    def empty() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in queries if not has_data(prometheus, expr)]

    with SteadyTraffic(sidecar, rounds=otlp_requests, version="1.4.0"):
        try:
            wait_until(
                lambda: dwell_reported(sidecar) and reviewed_at_random(sidecar) and not empty(),
                timeout=180,
                every=0.5,
            )
        except AssertionError:
            pytest.fail(f"panel queries without data: {empty()}; review: {review_state(sidecar)}")
    records = sample(
        registry, "rag_monitor_records_total", collector="kafka", outcome="dead_lettered"
    )
    assert records == 1
