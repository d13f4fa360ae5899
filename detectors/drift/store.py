"""The drift state in ``service.state_dir``: references, probe set, test history, samples,
and the traffic of each representation (SQLite).

One file, ``drift.sqlite3``, written by the detector's worker thread and read
by ``rag-monitor report drift`` and ``rag-monitor drift set-reference`` (WAL
mode lets them read while the sidecar writes). Vectors are float32 blobs.

Bounded in time and in size (``detectors/drift/database.py``): each test offers
a random sample of its new vectors, and each hour keeps a uniform random
subsample of at most ``SAMPLES_PER_HOUR`` of them, so the report's clusters get
a few thousand vectors a week whatever the traffic; tests and samples older
than ``RETENTION_DAYS`` are pruned (the weekly report needs a week, a month of
history lets it compare weeks); ``shrink`` fits the files into a byte budget.

References are versioned: one is active per representation (the embedding model of its
vectors), earlier ones stay for ``drift set-reference --snapshot``, and only the
references of the ``keep`` most recently used representations are kept.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.drift.database import (
    FILE_NAME,
    HOUR_CUT,
    SAMPLES_PER_HOUR,
    TRIM_HOUR,
    file_bytes,
    open_database,
    release,
    shrink,
)
from detectors.drift.result import DriftResult
from detectors.drift.traffic import RepresentationLog

RETENTION_DAYS = 35
PROBES = 64  # pinned from the first reference, for neighbour stability
_PRUNE_EVERY_S = 3600.0

Float32 = npt.NDArray[np.float32]


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
class ReferenceInfo:
    """A stored reference without its vectors, as ``drift references`` lists it."""

    id: int
    created: float
    source: str
    representation: str
    size: int
    dim: int
    active: bool


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
    representation: str | None = None


def _blob(vectors: npt.ArrayLike) -> bytes:
    return np.ascontiguousarray(vectors, dtype=np.float32).tobytes()


def _vectors(blob: bytes, dim: int) -> Float32:
    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim).copy()


class DriftStore(RepresentationLog):
    """Reads and writes the drift state; one instance per thread.

    ``max_bytes`` (the store's share of ``service.state_max_bytes``) sizes the WAL;
    ``timeout_s`` is how long a write waits for a reader's lock; ``seed`` seeds the
    random ranks of the samples.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        create: bool = True,
        max_bytes: int | None = None,
        timeout_s: float = 30.0,
        seed: int | None = None,
    ) -> None:
        self.path = Path(state_dir) / FILE_NAME
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise FileNotFoundError(f"no drift state at {self.path}")
        self._db = open_database(self.path, max_bytes, timeout_s)
        self._last_prune = 0.0
        self._random = random.Random(seed)

    def close(self) -> None:
        self._db.close()

    def size_bytes(self) -> int:
        """The file with its WAL, shared-memory and journal files."""
        return file_bytes(self.path)

    def checkpoint(self) -> None:
        """Copy the WAL into the file and truncate it; give freed pages back."""
        release(self._db)

    def shrink(self, target_bytes: int) -> dict[str, int]:
        """Delete the oldest samples, then inactive references, then tests until the files
        fit ``target_bytes``; rows deleted per table."""
        return shrink(self._db, self.path, target_bytes)

    # --- reference -------------------------------------------------------------------------

    def set_reference(
        self,
        vectors: npt.ArrayLike,
        source: str,
        representation: str,
        texts: Sequence[str | None] | None = None,
        created: float | None = None,
    ) -> int:
        """Store ``vectors`` as the active reference of ``representation`` (the one before
        stays, inactive); pin the probe set if there is none."""
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or len(array) < 2:
            raise ValueError("a reference needs at least two vectors of one dimension")
        if not np.isfinite(array).all():
            raise ValueError("a reference must not contain NaN or infinite values")
        created = time.time() if created is None else created
        with self._db:
            self._db.execute(
                "UPDATE reference SET active = 0 WHERE representation = ?", (representation,)
            )
            cursor = self._db.execute(
                "INSERT INTO reference (created, source, representation, dim, n, vectors, texts,"
                " active, last_used) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
                (
                    created,
                    source,
                    representation,
                    array.shape[1],
                    len(array),
                    _blob(array),
                    None if texts is None else json.dumps(list(texts)),
                    created,
                ),
            )
            reference_id = int(cursor.lastrowid or 0)
            if self._db.execute("SELECT COUNT(*) FROM probes").fetchone()[0] == 0:
                picked = np.random.default_rng(reference_id).permutation(len(array))[:PROBES]
                self._db.executemany(
                    "INSERT INTO probes (reference_id, vector, text, representation)"
                    " VALUES (?, ?, ?, ?)",
                    [
                        (
                            reference_id,
                            _blob(array[i]),
                            None if texts is None else texts[i],
                            representation,
                        )
                        for i in sorted(picked)
                    ],
                )
        return reference_id

    def activate(self, reference_id: int) -> Reference:
        """Make a stored reference the active one of its representation again."""
        found = self.reference(reference_id)
        if found is None:
            raise ValueError(f"no stored reference {reference_id} (see `drift references`)")
        with self._db:
            self._db.execute(
                "UPDATE reference SET active = (id = ?), last_used = ? WHERE representation = ?",
                (reference_id, time.time(), found.representation),
            )
        return found

    def active_reference_id(self, representation: str) -> int | None:
        row = self._db.execute(
            "SELECT id FROM reference WHERE active = 1 AND representation = ?", (representation,)
        ).fetchone()
        return None if row is None else int(row[0])

    def reference(
        self, reference_id: int | None = None, representation: str | None = None
    ) -> Reference | None:
        """The reference with ``reference_id``, else the active one of ``representation``,
        else the newest active one."""
        row = self._db.execute(
            "SELECT id, created, source, representation, dim, vectors, texts FROM reference"
            " WHERE id = ?1 OR (?1 IS NULL AND active = 1 AND coalesce(?2, representation)"
            " = representation) ORDER BY id = ?1 DESC, id DESC LIMIT 1",
            (reference_id, representation),
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

    def references(self) -> list[ReferenceInfo]:
        """Every stored reference, oldest first."""
        rows = self._db.execute(
            "SELECT id, created, source, representation, n, dim, active FROM reference ORDER BY id"
        ).fetchall()
        return [
            ReferenceInfo(int(i), float(c), str(s), str(r), int(n), int(d), bool(a))
            for i, c, s, r, n, d, a in rows
        ]

    def keep_representations(self, keep: int) -> int:
        """Delete the references of all but the ``keep`` most recently used representations;
        references deleted."""
        with self._db:
            return self._db.execute(
                "DELETE FROM reference WHERE representation NOT IN (SELECT representation FROM"
                " reference GROUP BY representation ORDER BY MAX(last_used) DESC LIMIT ?)",
                (keep,),
            ).rowcount

    def probes(self) -> tuple[Float32, list[str | None], str | None]:
        """The pinned probe set: vectors, texts and their representation."""
        rows = self._db.execute(
            "SELECT vector, text, representation FROM probes ORDER BY id"
        ).fetchall()
        if not rows:
            return np.empty((0, 0), dtype=np.float32), [], None
        vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for blob, _, _ in rows])
        return vectors, [text for _, text, _ in rows], rows[0][2]

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
        representation: str | None = None,
    ) -> int:
        """Append one test and a random sample of the vectors that arrived since the previous
        one; the sample joins its hour's subsample, which keeps ``SAMPLES_PER_HOUR``."""
        now = time.time() if now is None else now
        start, end = window_span or (None, None)
        with self._db:
            cursor = self._db.execute(
                "INSERT INTO tests (time, reference_id, backend, n_reference, n_window, statistic,"
                " p_value, threshold, sigma, is_drift, window_start, window_end, representation)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    representation,
                ),
            )
            test_id = int(cursor.lastrowid or 0)
            self._db.execute("UPDATE reference SET last_used = ? WHERE id = ?", (now, reference_id))
            self._add_samples(test_id, now, sample, sample_texts)
        if now - self._last_prune > _PRUNE_EVERY_S:
            self.prune(now - RETENTION_DAYS * 86400.0)
            self._last_prune = now
        return test_id

    def _add_samples(
        self, test_id: int, now: float, sample: npt.ArrayLike, texts: Sequence[str | None]
    ) -> None:
        """Each hour keeps the ``SAMPLES_PER_HOUR`` lowest random ranks of what it was offered;
        a vector whose rank is above the hour's current cut is not even written, so a full
        hour costs few writes."""
        hour = int(now // 3600)
        rows = np.asarray(sample, dtype=np.float32)
        ranks = [self._random.random() for _ in range(len(rows))]
        cut = self._db.execute(HOUR_CUT, (hour, SAMPLES_PER_HOUR - 1)).fetchone()
        kept = [
            (test_id, now, _blob(row), text, hour, rank)
            for row, text, rank in zip(rows, texts, ranks, strict=True)
            if cut is None or rank < cut[0]
        ]
        self._db.executemany(
            "INSERT INTO samples (test_id, time, vector, text, hour, rank)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            kept,
        )
        if kept:
            self._db.execute(TRIM_HOUR, (hour, hour, SAMPLES_PER_HOUR - 1))

    def prune(self, before: float) -> None:
        """Delete tests, samples, traffic counts and changes older than ``before``."""
        with self._db:
            for table in ("tests", "samples", "traffic", "changes"):
                self._db.execute(f"DELETE FROM {table} WHERE time < ?", (before,))  # noqa: S608
        release(self._db)

    def tests(self, since: float, until: float | None = None) -> list[TestRecord]:
        rows = self._db.execute(
            "SELECT time, reference_id, backend, statistic, p_value, threshold, is_drift,"
            " n_window, representation FROM tests WHERE time >= ? AND time <= ? ORDER BY time",
            (since, float("inf") if until is None else until),
        ).fetchall()
        return [
            TestRecord(float(t), int(r), str(b), float(s), p, th, bool(d), int(n), rep)
            for t, r, b, s, p, th, d, n, rep in rows
        ]

    def samples(
        self, since: float, until: float | None = None, representation: str | None = None
    ) -> tuple[Float32, list[str | None]]:
        """Sampled vectors (and texts, when kept) of the tests in the period, of one
        representation when it is given."""
        rows = self._db.execute(
            "SELECT vector, text FROM samples WHERE time >= ? AND time <= ? AND (? IS NULL OR"
            " test_id IN (SELECT id FROM tests WHERE representation = ?)) ORDER BY time",
            (since, float("inf") if until is None else until, representation, representation),
        ).fetchall()
        if not rows:
            return np.empty((0, 0), dtype=np.float32), []
        return (
            np.stack([np.frombuffer(blob, dtype=np.float32) for blob, _ in rows]),
            [text for _, text in rows],
        )

    # --- the latest tested window, for set-reference --------------------------------------

    def save_window(
        self, vectors: npt.ArrayLike, representation: str, now: float | None = None
    ) -> None:
        array = np.asarray(vectors, dtype=np.float32)
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO latest_window (id, time, dim, vectors, representation)"
                " VALUES (1, ?, ?, ?, ?)",
                (time.time() if now is None else now, array.shape[1], _blob(array), representation),
            )

    def latest_window(self) -> tuple[Float32, str] | None:
        """The last tested window and its representation."""
        row = self._db.execute(
            "SELECT dim, vectors, representation FROM latest_window WHERE id = 1"
        ).fetchone()
        return None if row is None else (_vectors(row[1], int(row[0])), str(row[2]))
