"""Cardinality: traffic with hundreds of intents, variants, document types, services,
versions and instrumentation scopes leaves the sidecar's /metrics within what its configured lists allow."""

from __future__ import annotations

import math
import random
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from detectors.release.detector import MAX_ENVIRONMENTS_PER_VERSION
from monitor.contract.config import Config
from monitor.contract.trace import Context, Feedback, Label, RagTrace
from monitor.contract.variants import NONE, OTHER
from monitor.contract.work_items import Events, WholeTrace
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until
from tests.hhem_checkpoint import build_checkpoint

pytestmark = pytest.mark.integration

TRACES = 10_000
DISTINCT = 300  # distinct values of each attribute in the traffic
INTENTS = ["billing", "refunds", "shipping", "account"]
DOCUMENT_TYPES = ["application/pdf", "text/html", "text/markdown"]
RELEASE = {"max_versions_per_service": 5, "max_services": 8}
INSTRUMENTATIONS = [
    "openinference.instrumentation.langchain",
    "opentelemetry.instrumentation.langchain",
]


def pool(prefix: str, listed: list[str]) -> list[str | None]:
    """The listed values, ``DISTINCT`` unlisted ones, and the attribute missing."""
    return [*listed, *(f"{prefix}-{n}" for n in range(DISTINCT)), None]


def traffic(rng: random.Random) -> list[RagTrace]:
    intents, variants = pool("intent", INTENTS), pool("variant", ["shadow", "canary"])
    types = pool("type", DOCUMENT_TYPES)
    scopes = pool("acme.tracer", INSTRUMENTATIONS)
    versions = [f"1.{n}.0" for n in range(DISTINCT)]
    services = [f"svc-{n}" for n in range(30)]
    environments = [f"env-{n}" for n in range(10)]
    traces = []
    for index in range(TRACES):
        contexts = tuple(
            Context(
                doc_id=f"d{rng.randrange(50)}",
                text="Refunds are possible within 30 days.",
                metadata={"file_type": t} if (t := rng.choice(types)) else {},
            )
            for _ in range(rng.randrange(4))
        )
        traces.append(
            RagTrace(
                trace_id=f"{index:032x}",
                time=datetime.now(UTC),
                source="otlp",
                session_id=f"s{rng.randrange(200)}",
                query=f"question {rng.randrange(20)}",
                answer="Refunds are possible within 30 days.",
                intent=rng.choice(intents),
                variant=rng.choice(variants),
                contexts=contexts,
                retrieved=tuple(c.doc_id for c in contexts),
                stages={"retrieve": rng.random() / 10, "generate": rng.random(), "total": 1.2},
                cost_usd=rng.random() / 100,
                service_name=rng.choice(services),
                service_version=rng.choice(versions),
                deployment_environment=rng.choice(environments),
                instrumentation=rng.choice(scopes),
            )
        )
    return traces


def events(rng: random.Random) -> list[Feedback | Label]:
    """Feedback and labels on known and unknown traces."""

    def trace_id() -> str:
        return f"{rng.randrange(2 * TRACES):032x}"

    feedback = [
        Feedback(trace_id(), rng.choice(["regenerate", "thumbs_down", "copy"]))  # type: ignore[arg-type]
        for _ in range(2000)
    ]
    labels = [Label((f"d{rng.randrange(50)}",), trace_id=trace_id()) for _ in range(500)]
    return [*feedback, *labels]


def allowed_values(config: Config) -> dict[str, int]:
    """How many values each traffic-driven label may take under ``config``."""
    slices = config.detectors.slices
    return {
        "variant": len(config.service.variants) + 1,  # + other
        "intent": len(slices.intents) + 2,  # + other, none
        "document_type": len(slices.document_types) + 2,
        "service": RELEASE["max_services"],
        "version": RELEASE["max_versions_per_service"],  # per service
        "environment": MAX_ENVIRONMENTS_PER_VERSION,
        "instrumentation": len(config.service.instrumentations) + 2,  # + other, none
    }


def series_by_family(port: int) -> dict[str, set[tuple[tuple[str, str], ...]]]:
    """Every series /metrics exposes, as its sample name and labels, by metric family."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    series: dict[str, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series[family.name].add((("__name__", s.name), *sorted(s.labels.items())))
    return series


def family_bound(labelsets: set[tuple[tuple[str, str], ...]], allowed: dict[str, int]) -> int:
    """The series a family may have: its label sets without the traffic-driven labels (closed
    sets fixed by the code: stage, outcome, le, ...), times the values each traffic-driven
    label it carries may take."""
    projected = {tuple(kv for kv in labels if kv[0] not in allowed) for labels in labelsets}
    carried = {name for labels in labelsets for name, _ in labels if name in allowed}
    return len(projected) * math.prod(allowed[name] for name in carried)


def test_series_stay_within_the_configured_lists(
    start_sidecar: Callable[..., Sidecar], tmp_path: Path
) -> None:
    """10,000 traces with hundreds of intents, variants, document types, versions and
    instrumentation scopes (300 each): every
    label value is allowed and each family's series count is within the configured bound."""
    checkpoint, _ = build_checkpoint(tmp_path / "hhem")
    sidecar = start_sidecar(
        service={"state_dir": str(tmp_path / "state"), "instrumentations": INSTRUMENTATIONS},
        detectors={
            "slices": {"intents": INTENTS, "document_types": DOCUMENT_TYPES},
            "release": RELEASE,
            "faithfulness": {
                "model": str(checkpoint),
                "sample_rate": 0.05,
                "max_per_second": 1000,
                "precision": "fp32",
            },
        },
    )
    rng = random.Random(14)
    for trace in traffic(rng):
        assert sidecar.pipeline.submit(WholeTrace(trace), timeout=30)
    assert sidecar.pipeline.submit(Events(events(rng), "otlp"), timeout=30)
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_requests_total") == TRACES, timeout=120)
    wait_until(lambda: sample(registry, "rag_monitor_events_total", type="label") == 500, 60)
    wait_until(lambda: sample(registry, "rag_faithfulness_evaluations_total") >= 50, timeout=120)

    allowed = allowed_values(sidecar.config)
    series = series_by_family(sidecar.metrics_server.port)
    values: dict[str, set[str]] = defaultdict(set)
    for labelsets in series.values():
        for labels in labelsets:
            for name, value in labels:
                if name in allowed:
                    values[name].add(value)
    versions: dict[str, set[str]] = defaultdict(set)
    for labels in series["rag_release_first_seen_timestamp_seconds"]:
        found = dict(labels)
        versions[found["service"]].add(found["version"])

    # Folding happened: unlisted values reached the labels only as other / none.
    assert values["variant"] == {"production", "shadow", "canary", OTHER}
    assert values["intent"] == {*INTENTS, OTHER, NONE}
    assert values["document_type"] == {*DOCUMENT_TYPES, OTHER, NONE}
    # (field coverage counts production requests only: about 33 of the 10,000 here)
    assert OTHER in values["instrumentation"] <= {*INSTRUMENTATIONS, OTHER, NONE}
    assert len(versions) == RELEASE["max_services"]
    assert all(len(v) == RELEASE["max_versions_per_service"] for v in versions.values())
    assert sample(registry, "rag_variant_folded_total") > 0
    assert sample(registry, "rag_release_dropped_total", reason="version_evicted") > 0

    bounds = {name: family_bound(labelsets, allowed) for name, labelsets in series.items()}
    over = {name: len(s) for name, s in series.items() if len(s) > bounds[name]}
    assert not over, f"families over their bound: {over} (bounds {bounds})"
    total, bound = sum(len(s) for s in series.values()), sum(bounds.values())
    print(f"cardinality: {total} series, bound {bound} from the config")
    assert total <= bound
