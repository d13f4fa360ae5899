"""The pair store: every pair outcome in SQLite (``shadow.sqlite3`` in ``state_dir``).

One row per outcome key, so that reading one's own records back from Kafka, or a replay,
changes nothing. ``report shadow`` reads it; ``retention_days`` bounds it.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import orjson

from detectors.shadow.model import PairOutcome, outcome_from_record, outcome_record

FILE_NAME = "shadow.sqlite3"
_TABLE = """
CREATE TABLE IF NOT EXISTS outcomes (
    key TEXT PRIMARY KEY,
    outcome TEXT NOT NULL,
    at REAL NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS outcomes_at ON outcomes (at);
"""


class PairStore:
    """Pair outcomes in SQLite; thread-safe (one lock)."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILE_NAME
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_TABLE)

    def add(self, outcome: PairOutcome) -> bool:
        """Keep ``outcome``; False when its key is already stored."""
        record = orjson.dumps(outcome_record(outcome))
        with self._lock, self._db:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO outcomes (key, outcome, at, record) VALUES (?, ?, ?, ?)",
                (outcome.key, outcome.outcome, outcome.at, record),
            )
            return cursor.rowcount == 1

    def since(self, cutoff: float) -> list[PairOutcome]:
        """The outcomes decided at ``cutoff`` (Unix seconds) or later, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM outcomes WHERE at >= ? ORDER BY at, key", (cutoff,)
            ).fetchall()
        return [outcome_from_record(orjson.loads(row[0])) for row in rows]

    def delete_older_than(self, cutoff: float) -> int:
        with self._lock, self._db:
            return self._db.execute("DELETE FROM outcomes WHERE at < ?", (cutoff,)).rowcount

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
