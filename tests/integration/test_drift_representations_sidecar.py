"""An encoder change through the running sidecar: EMBEDDING spans tagged with
``embedding.model_name`` over the real OTLP/HTTP exporter, the change counted and seen by a
real Prometheus, and the weekly report (the ``rag-monitor`` CLI) reading recall@k and the
false-exclusion ratio before and after it from that Prometheus."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from detectors.drift.alerting import rules
from detectors.drift.config import DriftConfig
from detectors.drift.report import write_report
from monitor.contract.config import Config
from monitor.contract.guardrails import GuardrailsConfig
from monitor.runtime.sidecar import Sidecar
from tests.conftest import PROBES, Probe, golden_set_lines, sample, wait_until
from tests.integration.conftest import Services, probe_request, query_series, send_query_vectors
from tests.otel_traffic import emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

DIM = 16
DRIFT = {"reference_size": 10, "window_size": 50, "test_every_records": 10, "n_permutations": 50}


def replay_probes(sidecar: Sidecar, probes: Sequence[Probe], scored_before: float) -> float:
    """Replay golden-set probes (rag.probe_id) and wait until the detector scored them."""
    endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
    provider, tracer = tracer_for(OTLPSpanExporter(endpoint=endpoint))
    base = time.time_ns()
    for i, probe in enumerate(probes):
        emit_rag_request(tracer, probe_request(probe, base + i * 10**6))
    provider.shutdown()
    expected = scored_before + len(probes)
    wait_until(lambda: scored(sidecar) == expected)
    return expected


def scored(sidecar: Sidecar) -> float:
    return sum(
        sample(sidecar.registry, name, variant="production") or sample(sidecar.registry, name)
        for name in ("rag_filter_eligible_queries_total", "rag_filter_no_eligible_gold_total")
    )


def seen_by_prometheus(prometheus: str, promql: str, value: float) -> bool:
    return any(v == value for v in query_series(prometheus, promql).values())


def test_an_encoder_change_is_counted_alerted_and_reported_with_quality_before_and_after(
    tmp_path: Path, start_sidecar: Callable[..., Sidecar], services: Services
) -> None:
    """enc-v1 then enc-v2 (tagged spans): one change, the alert expression true in Prometheus,
    no drift verdict; the report shows recall@k and the false-exclusion ratio of the labelled
    queries before (all probes: 0.5, 50%) and after (only the falsely excluded ones: 0, 100%)."""
    golden = tmp_path / "golden.jsonl"
    golden.write_text(golden_set_lines())
    state = tmp_path / "state"
    sidecar = start_sidecar(
        service={"state_dir": str(state)},
        detectors={"drift": DRIFT, "filter_exclusion": {"golden_set": str(golden)}},
    )
    assert sidecar.http is not None
    prometheus = services.start_prometheus(sidecar)
    registry, rng = sidecar.registry, np.random.default_rng(3)
    changes = "rag_drift_representation_changes_total"

    send_query_vectors(sidecar.http.port, rng.normal(size=(20, DIM)), "q", "enc-v1")
    wait_until(lambda: sample(registry, "rag_drift_vectors_total", signal="query_embedding") == 20)
    recalled = "sum(rag_retrieval_recall_count)"  # over k = 5 and 10
    wait_until(lambda: seen_by_prometheus(prometheus, recalled, 0), timeout=30)
    done = replay_probes(sidecar, PROBES, 0)
    wait_until(lambda: seen_by_prometheus(prometheus, recalled, 8))
    done = replay_probes(sidecar, PROBES, done)  # the by-variant series exist by now
    wait_until(lambda: seen_by_prometheus(prometheus, recalled, 16))
    time.sleep(2)  # scrapes before the change

    send_query_vectors(sidecar.http.port, rng.normal(size=(12, DIM)), "q", "enc-v2")
    # enc-v1 -> the probes' untagged vectors (unknown), then enc-v1 -> enc-v2.
    wait_until(lambda: sample(registry, changes, signal="query_embedding") == 2)
    wait_until(lambda: sample(registry, "rag_drift_representation_info", representation="enc-v2"))
    change_alert = rules(DriftConfig(), GuardrailsConfig()).alerting[1]
    assert change_alert["alert"] == "RagEmbeddingModelChanged"
    wait_until(lambda: query_series(prometheus, change_alert["expr"]), timeout=30)
    time.sleep(3)  # scrapes between the change and the labelled queries after it

    lost = [p for p in PROBES[:4] if not any(p.passes(doc) for doc in p.gold)]
    assert len(lost) == 2
    replay_probes(sidecar, lost, done)
    wait_until(lambda: seen_by_prometheus(prometheus, recalled, 20))
    time.sleep(2)
    assert registry.get_sample_value("rag_drift_detected", {"signal": "query_embedding"}) in (
        None,
        0.0,
    )

    config = Config.model_validate(
        {"service": {"state_dir": str(state)}, "detectors": {"drift": DRIFT}}
    )
    report = write_report(config, "1d", tmp_path / "report.md", prometheus=prometheus)
    assert [(c.old, c.new) for c in report.migration.changes] == [
        ("enc-v1", "unknown"),
        ("enc-v1", "enc-v2"),
    ]
    change = report.migration.changes[1]
    assert change.before is not None
    assert change.after is not None
    assert change.before.recall == pytest.approx({"5": 0.5, "10": 0.5})
    assert change.after.recall == pytest.approx({"5": 0.0, "10": 0.0})
    assert change.before.false_exclusion_ratio == pytest.approx(0.5)
    assert change.after.false_exclusion_ratio == pytest.approx(1.0)

    config_file = tmp_path / "monitor.yaml"
    config_file.write_text(
        yaml.safe_dump({"service": {"state_dir": str(state)}, "detectors": {"drift": DRIFT}})
    )
    cli = [sys.executable, "-m", "monitor"]
    out = tmp_path / "cli-report.md"
    subprocess.run(
        [
            *cli,
            "report",
            "drift",
            "--config",
            str(config_file),
            "--since",
            "1d",
            "--out",
            str(out),
            "--prometheus",
            prometheus,
        ],
        check=True,
        timeout=120,
    )
    text = out.read_text()
    assert "enc-v1 -> enc-v2" in text
    assert "day before: recall@10 0.500, recall@5 0.500; false-exclusion ratio 50.0%" in text
    assert "day after: recall@10 0.000, recall@5 0.000; false-exclusion ratio 100.0%" in text
    listed = subprocess.run(
        [*cli, "drift", "references", "--config", str(config_file)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert listed[0].split("\t")[:3] == ["id", "created", "representation"]
    assert {line.split("\t")[2] for line in listed[1:]} == {"enc-v1", "enc-v2"}
