"""The drift state in ``service.state_dir``: reference, probe set, test history, samples (SQLite).

One file, ``drift.sqlite3``, written by the detector's worker thread and read
by ``rag-monitor report drift`` and ``rag-monitor drift set-reference`` (WAL
mode lets them read while the sidecar writes). Vectors are float32 blobs.
History older than ``RETENTION_DAYS`` is pruned: the weekly report needs a
week, a month of history lets it compare weeks.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.drift.result import DriftResult

FILE_NAME = "drift.sqlite3"
RETENTION_DAYS = 35
PROBES = 64  # pinned from the first reference, for neighbour stability
_PRUNE_EVERY_S = 3600.0

Float32 = npt.NDArray[np.float32]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reference (
    id INTEGER PRIMARY KEY, created REAL NOT NULL, source TEXT NOT NULL,
    representation TEXT NOT NULL, dim INTEGER NOT NULL, n INTEGER NOT NULL,
    vectors BLOB NOT NULL, texts TEXT, active INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY, reference_id INTEGER NOT NULL, vector BLOB NOT NULL, text TEXT
);
CREATE TABLE IF NOT EXISTS tests (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, reference_id INTEGER NOT NULL,
    backend TEXT NOT NULL, n_reference INTEGER NOT NULL, n_window INTEGER NOT NULL,
    statistic REAL NOT NULL, p_value REAL, threshold REAL, sigma REAL,
    is_drift INTEGER NOT NULL, window_start REAL, window_end REAL
);
CREATE INDEX IF NOT EXISTS tests_time ON tests (time);
CREATE TABLE IF NOT EXISTS samples (
    test_id INTEGER NOT NULL, time REAL NOT NULL, vector BLOB NOT NULL, text TEXT
);
CREATE INDEX IF NOT EXISTS samples_time ON samples (time);
CREATE TABLE IF NOT EXISTS latest_window (
    id INTEGER PRIMARY KEY CHECK (id = 1), time REAL NOT NULL, dim INTEGER NOT NULL,
    vectors BLOB NOT NULL
);
"""


@dataclass(frozen=True)
class Reference:
    """A stored reference: its vectors (rows) and, when examples are kept, their texts."""

    id: int
    created: float
    source: str
    representation: str
    vectors: Float32
    texts: list[str | None] | None


@dataclass(frozen=True)
class TestRecord:
    """One row of the history."""

    time: float
    reference_id: int
    backend: str
    statistic: float
    p_value: float | None
    threshold: float | None
    is_drift: bool
    n_window: int


def _blob(vectors: npt.ArrayLike) -> bytes:
    return np.ascontiguousarray(vectors, dtype=np.float32).tobytes()


def _vectors(blob: bytes, dim: int) -> Float32:
    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim).copy()


class DriftStore:
    """Reads and writes the drift state; one instance per thread."""

    def __init__(self, state_dir: Path, *, create: bool = True) -> None:
        self.path = Path(state_dir) / FILE_NAME
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise FileNotFoundError(f"no drift state at {self.path}")
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._last_prune = 0.0

    def close(self) -> None:
        self._db.close()

    # --- reference -------------------------------------------------------------------------

    def set_reference(
        self,
        vectors: npt.ArrayLike,
        source: str,
        representation: str,
        texts: Sequence[str | None] | None = None,
        created: float | None = None,
    ) -> int:
        """Store ``vectors`` as the active reference; pin the probe set if there is none."""
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or len(array) < 2:
            raise ValueError("a reference needs at least two vectors of one dimension")
        if not np.isfinite(array).all():
            raise ValueError("a reference must not contain NaN or infinite values")
        with self._db:
            self._db.execute("UPDATE reference SET active = 0")
            cursor = self._db.execute(
                "INSERT INTO reference (created, source, representation, dim, n, vectors, texts,"
                " active) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    time.time() if created is None else created,
                    source,
                    representation,
                    array.shape[1],
                    len(array),
                    _blob(array),
                    None if texts is None else json.dumps(list(texts)),
                ),
            )
            reference_id = int(cursor.lastrowid or 0)
            if self._db.execute("SELECT COUNT(*) FROM probes").fetchone()[0] == 0:
                picked = np.random.default_rng(reference_id).permutation(len(array))[:PROBES]
                self._db.executemany(
                    "INSERT INTO probes (reference_id, vector, text) VALUES (?, ?, ?)",
                    [
                        (reference_id, _blob(array[i]), None if texts is None else texts[i])
                        for i in sorted(picked)
                    ],
                )
        return reference_id

    def active_reference_id(self) -> int | None:
        row = self._db.execute("SELECT id FROM reference WHERE active = 1").fetchone()
        return None if row is None else int(row[0])

    def reference(self, reference_id: int | None = None) -> Reference | None:
        """The active reference, or the one with ``reference_id``."""
        row = self._db.execute(
            "SELECT id, created, source, representation, dim, vectors, texts FROM reference"
            " WHERE (? IS NULL AND active = 1) OR id = ?",
            (reference_id, reference_id),
        ).fetchone()
        if row is None:
            return None
        rid, created, source, representation, dim, blob, texts = row
        return Reference(
            int(rid),
            float(created),
            str(source),
            str(representation),
            _vectors(blob, int(dim)),
            None if texts is None else json.loads(texts),
        )

    def references(self) -> list[tuple[int, float, str, str]]:
        """Every reference as (id, created, source, representation), oldest first."""
        rows = self._db.execute(
            "SELECT id, created, source, representation FROM reference ORDER BY id"
        ).fetchall()
        return [(int(i), float(c), str(s), str(r)) for i, c, s, r in rows]

    def probes(self) -> tuple[Float32, list[str | None]]:
        rows = self._db.execute("SELECT vector, text FROM probes ORDER BY id").fetchall()
        if not rows:
            return np.empty((0, 0), dtype=np.float32), []
        vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for blob, _ in rows])
        return vectors, [text for _, text in rows]

    # --- history ---------------------------------------------------------------------------

    def add_test(
        self,
        result: DriftResult,
        reference_id: int,
        *,
        window_span: tuple[float, float] | None,
        sample: npt.ArrayLike,
        sample_texts: Sequence[str | None],
        now: float | None = None,
    ) -> int:
        """Append one test and a sample of the vectors that arrived since the previous one."""
        now = time.time() if now is None else now
        start, end = window_span or (None, None)
        with self._db:
            cursor = self._db.execute(
                "INSERT INTO tests (time, reference_id, backend, n_reference, n_window, statistic,"
                " p_value, threshold, sigma, is_drift, window_start, window_end)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    now,
                    reference_id,
                    result.backend,
                    result.n_reference,
                    result.n_window,
                    result.statistic,
                    result.p_value,
                    result.threshold,
                    result.sigma,
                    int(result.is_drift),
                    start,
                    end,
                ),
            )
            test_id = int(cursor.lastrowid or 0)
            rows = np.asarray(sample, dtype=np.float32)
            self._db.executemany(
                "INSERT INTO samples (test_id, time, vector, text) VALUES (?, ?, ?, ?)",
                [
                    (test_id, now, _blob(row), text)
                    for row, text in zip(rows, sample_texts, strict=True)
                ],
            )
        if now - self._last_prune > _PRUNE_EVERY_S:
            self.prune(now - RETENTION_DAYS * 86400.0)
            self._last_prune = now
        return test_id

    def prune(self, before: float) -> None:
        with self._db:
            self._db.execute("DELETE FROM tests WHERE time < ?", (before,))
            self._db.execute("DELETE FROM samples WHERE time < ?", (before,))

    def tests(self, since: float, until: float | None = None) -> list[TestRecord]:
        rows = self._db.execute(
            "SELECT time, reference_id, backend, statistic, p_value, threshold, is_drift, n_window"
            " FROM tests WHERE time >= ? AND time <= ? ORDER BY time",
            (since, float("inf") if until is None else until),
        ).fetchall()
        return [
            TestRecord(float(t), int(r), str(b), float(s), p, th, bool(d), int(n))
            for t, r, b, s, p, th, d, n in rows
        ]

    def samples(self, since: float, until: float | None = None) -> tuple[Float32, list[str | None]]:
        """Sampled vectors (and texts, when kept) of the tests in the period."""
        rows = self._db.execute(
            "SELECT vector, text FROM samples WHERE time >= ? AND time <= ? ORDER BY time",
            (since, float("inf") if until is None else until),
        ).fetchall()
        if not rows:
            return np.empty((0, 0), dtype=np.float32), []
        return (
            np.stack([np.frombuffer(blob, dtype=np.float32) for blob, _ in rows]),
            [text for _, text in rows],
        )

    # --- the latest tested window, for set-reference --------------------------------------

    def save_window(self, vectors: npt.ArrayLike, now: float | None = None) -> None:
        array = np.asarray(vectors, dtype=np.float32)
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO latest_window (id, time, dim, vectors) VALUES (1, ?, ?, ?)",
                (time.time() if now is None else now, array.shape[1], _blob(array)),
            )

    def latest_window(self) -> Float32 | None:
        row = self._db.execute("SELECT dim, vectors FROM latest_window WHERE id = 1").fetchone()
        return None if row is None else _vectors(row[1], int(row[0]))
