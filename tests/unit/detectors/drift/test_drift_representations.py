"""Encoder-aware drift: one reference per representation (embedding model), a model change
is an event and never drift, versioned references, bounded representation series."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from detectors.drift.config import DriftConfig
from detectors.drift.detector import DriftDetector
from detectors.drift.metrics import SIGNAL
from detectors.drift.reference import list_references, set_reference
from detectors.drift.store import DriftStore
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from tests.conftest import sample, wait_until
from tests.tiny_bert import save_tiny_bert

DIM = 32


def anisotropic(rng: np.random.Generator, n: int, shift: float = 0.0) -> np.ndarray:
    """Query vectors like real embeddings: a non-zero mean and unequal variances per axis."""
    mean = np.linspace(-1.5, 2.0, DIM)
    scales = np.linspace(0.3, 2.5, DIM)
    return mean + (rng.normal(size=(n, DIM)) + shift) * scales


def rotation(seed: int) -> np.ndarray:
    """A random orthogonal matrix: the same queries in another encoder's basis."""
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIM, DIM)))
    return q * np.sign(np.diag(r))


def trace(vector: np.ndarray, model: str | None, query: str = "q") -> RagTrace:
    return RagTrace(
        trace_id="t",
        time=datetime.fromtimestamp(time.time(), tz=UTC),
        source="otlp",
        query=query,
        query_embedding=tuple(float(v) for v in vector),
        query_embedding_model=model,
    )


def config(**overrides: object) -> DriftConfig:
    settings: dict[str, object] = {
        "reference_size": 120,
        "window_size": 80,
        "test_every_records": 80,
        "p_value": 0.01,
        "n_permutations": 100,
    }
    settings.update(overrides)
    return DriftConfig.model_validate(settings)


def feed(detector: DriftDetector, vectors: np.ndarray, model: str | None) -> None:
    for vector in vectors:
        detector.observe(trace(vector, model))


def outcomes(registry: SidecarRegistry) -> tuple[float, float]:
    return (
        sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift"),
        sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="drift"),
    )


def changes(registry: SidecarRegistry) -> float:
    return sample(registry, "rag_drift_representation_changes_total", signal=SIGNAL)


def test_a_rotated_encoder_is_a_change_not_drift_and_keeps_its_power_and_rollback(
    tmp_path: Path,
) -> None:
    """enc-v1 fills its reference; enc-v2 (the same queries rotated) is one change, fills its
    own reference and is not flagged; a real shift in enc-v2 space is; after a restart,
    enc-v1 is tested against its stored reference after one window, without a refill."""
    rng = np.random.default_rng(41)
    v2 = rotation(7)
    registry = SidecarRegistry()
    detector = DriftDetector(config(), tmp_path, registry, seed=1)
    detector.start()
    feed(detector, anisotropic(rng, 120 + 2 * 80), "enc-v1")
    wait_until(lambda: detector.tests_done == 2)
    with capture_logs() as logs:
        feed(detector, anisotropic(rng, 120 + 2 * 80) @ v2.T, "enc-v2")
        wait_until(lambda: detector.tests_done == 4)
    assert outcomes(registry) == (4, 0)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    assert changes(registry) == 1
    changed = [e for e in logs if e["event"] == "drift_representation_changed"]
    assert [(e["old"], e["new"]) for e in changed] == [("enc-v1", "enc-v2")]
    assert sample(registry, "rag_drift_representation_info", representation="enc-v2") == 1
    assert (
        registry.get_sample_value("rag_drift_representation_info", {"representation": "enc-v1"})
        is None
    )  # no enc-v1 vector among the last window_size
    assert sample(registry, "rag_drift_reference_fill_ratio", representation="enc-v2") == 1

    feed(detector, anisotropic(rng, 80, shift=0.5) @ v2.T, "enc-v2")
    wait_until(lambda: detector.tests_done == 5)
    assert outcomes(registry) == (4, 1)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
    detector.shutdown()

    registry = SidecarRegistry()
    restarted = DriftDetector(config(), tmp_path, registry, seed=2)
    restarted.start()
    feed(restarted, anisotropic(rng, 80), "enc-v1")
    wait_until(lambda: restarted.tests_done == 1)  # one window: the stored reference
    restarted.shutdown()
    assert outcomes(registry) == (1, 0)
    assert changes(registry) == 1  # enc-v2 was the latest traffic before the restart
    store = DriftStore(tmp_path, create=False)
    by_id = {r.id: r.representation for r in store.references()}
    tests = store.tests(0)
    store.close()
    assert sorted(by_id.values()) == ["enc-v1", "enc-v2"]
    assert [t.representation for t in tests] == ["enc-v1"] * 2 + ["enc-v2"] * 3 + ["enc-v1"]
    assert all(by_id[t.reference_id] == t.representation for t in tests)


def test_canary_traffic_of_two_representations_is_tested_per_representation(
    tmp_path: Path,
) -> None:
    """50/50 traffic of enc-a and its rotation enc-b: each fills and is tested against its own
    reference, nothing is flagged, one change (enc-b's arrival), shares of one half each."""
    rng = np.random.default_rng(43)
    b = rotation(9)
    registry = SidecarRegistry()
    detector = DriftDetector(config(), tmp_path, registry, seed=1)
    detector.start()
    queries = anisotropic(rng, 2 * (120 + 2 * 80))
    for a_query, b_query in zip(queries[::2], queries[1::2], strict=True):
        detector.observe(trace(a_query, "enc-a"))
        detector.observe(trace(b @ b_query, "enc-b"))
    wait_until(lambda: detector.tests_done == 4)
    detector.shutdown()
    assert outcomes(registry) == (4, 0)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    assert changes(registry) == 1
    for name in ("enc-a", "enc-b"):
        assert sample(registry, "rag_drift_representation_share", representation=name) == 0.5
        assert sample(registry, "rag_drift_representation_info", representation=name) == 1
    store = DriftStore(tmp_path, create=False)
    by_id = {r.id: r.representation for r in store.references()}
    tests = store.tests(0)
    store.close()
    assert sorted(t.representation or "" for t in tests) == ["enc-a"] * 2 + ["enc-b"] * 2
    assert all(by_id[t.reference_id] == t.representation for t in tests)


def test_a_thousand_model_names_keep_at_most_k_references_and_bounded_series(
    tmp_path: Path,
) -> None:
    """1,000 distinct model names, each filling a reference: the store keeps the references of
    the last max_representations, and each representation series has at most that many
    values (the share one more: other)."""
    keep = 4
    rng = np.random.default_rng(47)
    registry = SidecarRegistry()
    settings = config(
        reference_size=2, window_size=2, test_every_records=1, max_representations=keep
    )
    detector = DriftDetector(settings, tmp_path, registry, seed=1, clock=lambda: 1_700_000_000.0)
    detector.start()
    with capture_logs() as logs:
        for number in range(1000):
            feed(detector, rng.normal(size=(2, 8)), f"model-{number}")
        wait_until(
            lambda: sample(registry, "rag_drift_vectors_total", signal=SIGNAL) == 2000,
            timeout=120,
        )
    assert changes(registry) == 999
    logged = [e for e in logs if e["event"] == "drift_representation_changed"]
    assert len(logged) == 1  # one line a minute, not one per name
    labelled: dict[str, set[str]] = {}
    for line in generate_latest(registry).decode().splitlines():
        if 'representation="' in line and not line.startswith("#"):
            name, value = line.split("{", 1)[0], line.split('representation="', 1)[1]
            labelled.setdefault(name, set()).add(value.split('"', 1)[0])
    detector.shutdown()
    assert set(labelled["rag_drift_representation_info"]) <= {
        f"model-{n}" for n in range(996, 1000)
    }
    assert len(labelled["rag_drift_representation_info"]) <= keep
    assert len(labelled["rag_drift_reference_fill_ratio"]) <= keep
    assert len(labelled["rag_drift_representation_share"]) <= keep + 1
    assert sample(registry, "rag_drift_representations_evicted_total", signal=SIGNAL) == 1000 - keep
    references = list_references(tmp_path)
    assert {r.representation for r in references} == {f"model-{n}" for n in range(996, 1000)}
    assert len(references) == keep


def test_set_reference_restores_a_snapshot_by_hand_and_lists_every_version(
    tmp_path: Path,
) -> None:
    """Two versions of enc-v1's reference: `--snapshot` makes the first active again, the
    running detector picks it up before its next test, and the list shows both versions."""
    rng = np.random.default_rng(53)
    settings = config()
    registry = SidecarRegistry()
    detector = DriftDetector(settings, tmp_path, registry, seed=1)
    detector.start()
    feed(detector, anisotropic(rng, 120 + 80), "enc-v1")
    wait_until(lambda: detector.tests_done == 1)
    shifted = tmp_path / "shifted.npy"
    np.save(shifted, anisotropic(rng, 120, shift=1.0))
    assert set_reference(settings, tmp_path, file=shifted, representation="enc-v1") == (2, 120)
    feed(detector, anisotropic(rng, 80), "enc-v1")
    wait_until(lambda: detector.tests_done == 2)
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1  # against the shifted one

    with pytest.raises(ValueError, match="of representation 'enc-v1'"):
        set_reference(settings, tmp_path, snapshot=1, representation="enc-v2")
    assert set_reference(settings, tmp_path, snapshot=1, representation="enc-v1") == (1, 120)
    feed(detector, anisotropic(rng, 80), "enc-v1")
    wait_until(lambda: detector.tests_done == 3)
    detector.shutdown()
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    listed = [(r.id, r.representation, r.size, r.active) for r in list_references(tmp_path)]
    assert listed == [(1, "enc-v1", 120, True), (2, "enc-v1", 120, False)]


# The schema of the version before representations had names (one reference, "traced").
PREVIOUS_SCHEMA = """
CREATE TABLE reference (
    id INTEGER PRIMARY KEY, created REAL NOT NULL, source TEXT NOT NULL,
    representation TEXT NOT NULL, dim INTEGER NOT NULL, n INTEGER NOT NULL,
    vectors BLOB NOT NULL, texts TEXT, active INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE probes (
    id INTEGER PRIMARY KEY, reference_id INTEGER NOT NULL, vector BLOB NOT NULL, text TEXT
);
CREATE TABLE tests (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, reference_id INTEGER NOT NULL,
    backend TEXT NOT NULL, n_reference INTEGER NOT NULL, n_window INTEGER NOT NULL,
    statistic REAL NOT NULL, p_value REAL, threshold REAL, sigma REAL,
    is_drift INTEGER NOT NULL, window_start REAL, window_end REAL
);
CREATE TABLE samples (
    test_id INTEGER NOT NULL, time REAL NOT NULL, vector BLOB NOT NULL, text TEXT,
    hour INTEGER NOT NULL DEFAULT 0, rank REAL NOT NULL DEFAULT 0
);
CREATE TABLE latest_window (
    id INTEGER PRIMARY KEY CHECK (id = 1), time REAL NOT NULL, dim INTEGER NOT NULL,
    vectors BLOB NOT NULL
);
"""


def test_a_state_file_of_the_previous_schema_is_migrated_and_its_reference_used(
    tmp_path: Path,
) -> None:
    """A file with one "traced" reference and no representation columns loads: its reference
    becomes the untagged representation's (one log line) and untagged traffic is tested
    against it after one window, without a refill."""
    import sqlite3

    rng = np.random.default_rng(61)
    db = sqlite3.connect(tmp_path / "drift.sqlite3")
    db.executescript(PREVIOUS_SCHEMA)
    vectors = anisotropic(rng, 120).astype(np.float32)
    db.execute(
        "INSERT INTO reference VALUES (1, 1700000000.0, 'first_traffic', 'traced', ?, 120, ?,"
        " NULL, 1)",
        (DIM, vectors.tobytes()),
    )
    db.execute("INSERT INTO probes VALUES (1, 1, ?, NULL)", (vectors[0].tobytes(),))
    db.commit()
    db.close()
    registry = SidecarRegistry()
    detector = DriftDetector(config(), tmp_path, registry, seed=1)
    with capture_logs() as logs:
        detector.start()
        feed(detector, anisotropic(rng, 80), None)
        wait_until(lambda: detector.tests_done == 1)
    detector.shutdown()
    assert outcomes(registry) == (1, 0)
    migrated = [e for e in logs if e["event"] == "drift_state_migrated"]
    assert [(e["references"], e["representation"]) for e in migrated] == [(1, "unknown")]
    [reference] = list_references(tmp_path)
    assert (reference.id, reference.representation, reference.active) == (1, "unknown", True)


# --- the weekly report's representation changes, with the sidecar's own embedder ----------

TOPICS = [
    ["refund", "invoice", "charge", "billing"],
    ["parcel", "delivery", "tracking", "courier"],
    ["password", "login", "account", "reset"],
]


@pytest.fixture(scope="module")
def tiny_embedder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer BERT with a vocabulary of the test's words, saved as a model directory."""
    words = sorted({word for topic in TOPICS for word in topic} | {"where", "is", "my", "how"})
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-embedder"), words)


def questions(rng: np.random.Generator, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        topic = TOPICS[rng.integers(len(TOPICS))]
        texts.append(" ".join(rng.choice(["where", "is", "my", "how", *topic], size=5)))
    return texts


def test_the_weekly_report_shows_the_encoder_change_with_the_pinned_probe_stability(
    tmp_path: Path, tiny_embedder: Path
) -> None:
    """With drift.embedder set, the application's switch from enc-v1 to enc-v2 is one change
    and no drift; the report lists it (when, from, to, traffic shares), the pinned probe
    set's neighbour stability across it, and how to get recall@k and false exclusions."""
    from detectors.drift.report import write_report
    from monitor.contract.config import Config

    rng = np.random.default_rng(59)
    drift = {
        "embedder": str(tiny_embedder),
        "reference_size": 40,
        "window_size": 30,
        "test_every_records": 30,
        "n_permutations": 100,
        "p_value": 0.01,
    }
    registry = SidecarRegistry()
    detector = DriftDetector(DriftConfig.model_validate(drift), tmp_path, registry, seed=1)
    detector.start()
    for text in questions(rng, 40 + 2 * 30):
        detector.observe(trace(rng.normal(size=8), "enc-v1", text))
    wait_until(lambda: detector.tests_done == 2, timeout=60)
    for text in questions(rng, 2 * 30):
        detector.observe(trace(rng.normal(size=12), "enc-v2", text))  # another dimension too
    wait_until(lambda: detector.tests_done == 4, timeout=60)
    detector.shutdown()
    assert outcomes(registry) == (4, 0)
    assert changes(registry) == 1
    pinned = f"embedder:{tiny_embedder}"
    assert sample(registry, "rag_drift_reference_fill_ratio", representation=pinned) == 1

    config = Config.model_validate(
        {"service": {"state_dir": str(tmp_path)}, "detectors": {"drift": drift}}
    )
    out = tmp_path / "report.md"
    report = write_report(config, "7d", out)
    text = out.read_text()
    assert [(c.old, c.new) for c in report.migration.changes] == [("enc-v1", "enc-v2")]
    assert report.migration.shares == {"enc-v1": 100 / 160, "enc-v2": 60 / 160}
    assert "## Representation changes" in text
    assert "enc-v1 -> enc-v2 (traffic share in the period: enc-v1 62%, enc-v2 38%)" in text
    stability = report.migration.changes[0].stability
    assert stability is not None
    assert stability.comparable
    assert stability.probes == 40
    assert f"{stability.probes} probes keep at least half their topics" in text
    assert "run with --prometheus URL" in text


def test_shrinking_the_store_deletes_old_versions_but_keeps_each_active_reference(
    tmp_path: Path,
) -> None:
    """Three representations with two versions each: a budget below what they take deletes
    the inactive versions and keeps the active reference of every representation."""
    rng = np.random.default_rng(67)
    store = DriftStore(tmp_path)
    for name in ("enc-a", "enc-b", "enc-c"):
        for _ in range(2):
            store.set_reference(rng.normal(size=(500, 64)), "test", name)
    deleted = store.shrink(1)
    active = [(r.representation, r.active) for r in store.references()]
    store.close()
    assert deleted["references"] == 3
    assert active == [("enc-a", True), ("enc-b", True), ("enc-c", True)]
