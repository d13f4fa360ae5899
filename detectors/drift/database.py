"""The SQLite file of the drift store: its schema, upgrades of older files, and its size.

The bound must hold on disk, not only in rows: freed pages go back to the file
system (``auto_vacuum=INCREMENTAL``, then a WAL checkpoint that truncates), and
the WAL is kept to a sixteenth of the store's budget (``journal_size_limit``,
``wal_autocheckpoint``). ``shrink`` deletes the oldest samples, then the oldest
inactive references, then the oldest traffic counts, changes and tests until the files
fit a byte budget.

Every reference, test, probe and window carries its representation (the embedding
model of its vectors). Files of the version before had one representation, ``traced``,
for every traced vector: it becomes ``unknown`` (what an untagged vector is now), with one
``drift_state_migrated`` log line.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import structlog

log = structlog.get_logger("rag_monitor.drift")

FILE_NAME = "drift.sqlite3"
FILES = (FILE_NAME, f"{FILE_NAME}-wal", f"{FILE_NAME}-shm", f"{FILE_NAME}-journal")
SAMPLES_PER_HOUR = 128  # a week: 21,504 vectors for the report's clusters
_MAX_WAL_BYTES = 4 << 20
_MIN_WAL_BYTES = 64 << 10
_SHRINK_ROUNDS = 100
# Rows deleted (and pages moved) pass through the WAL before the file shrinks: small steps
# keep that passing bulge small.
_SHRINK_STEP = 0.03

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reference (
    id INTEGER PRIMARY KEY, created REAL NOT NULL, source TEXT NOT NULL,
    representation TEXT NOT NULL, dim INTEGER NOT NULL, n INTEGER NOT NULL,
    vectors BLOB NOT NULL, texts TEXT, active INTEGER NOT NULL DEFAULT 0, last_used REAL
);
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY, reference_id INTEGER NOT NULL, vector BLOB NOT NULL, text TEXT,
    representation TEXT
);
CREATE TABLE IF NOT EXISTS tests (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, reference_id INTEGER NOT NULL,
    backend TEXT NOT NULL, n_reference INTEGER NOT NULL, n_window INTEGER NOT NULL,
    statistic REAL NOT NULL, p_value REAL, threshold REAL, sigma REAL,
    is_drift INTEGER NOT NULL, window_start REAL, window_end REAL, representation TEXT
);
CREATE INDEX IF NOT EXISTS tests_time ON tests (time);
CREATE TABLE IF NOT EXISTS samples (
    test_id INTEGER NOT NULL, time REAL NOT NULL, vector BLOB NOT NULL, text TEXT,
    hour INTEGER NOT NULL DEFAULT 0, rank REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS samples_time ON samples (time);
CREATE TABLE IF NOT EXISTS latest_window (
    id INTEGER PRIMARY KEY CHECK (id = 1), time REAL NOT NULL, dim INTEGER NOT NULL,
    vectors BLOB NOT NULL, representation TEXT
);
CREATE TABLE IF NOT EXISTS traffic (
    time REAL NOT NULL, representation TEXT NOT NULL, vectors INTEGER NOT NULL,
    PRIMARY KEY (time, representation)
);
CREATE TABLE IF NOT EXISTS current_representations (representation TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, old_representation TEXT NOT NULL,
    new_representation TEXT NOT NULL
);
"""
# Columns added since the first version: (table, column, declaration).
_ADDED_COLUMNS = (
    ("samples", "hour", "INTEGER NOT NULL DEFAULT 0"),
    ("samples", "rank", "REAL NOT NULL DEFAULT 0"),
    ("reference", "last_used", "REAL"),
    ("probes", "representation", "TEXT"),
    ("tests", "representation", "TEXT"),
    ("latest_window", "representation", "TEXT"),
)
LEGACY_REPRESENTATION = "traced"
UNTAGGED = "unknown"  # the representation of a query vector traced without its model
# Each hour keeps the samples of its ``SAMPLES_PER_HOUR`` lowest random ranks: a uniform
# random subsample of what its tests offered.
HOUR_CUT = "SELECT rank FROM samples WHERE hour = ? ORDER BY rank LIMIT 1 OFFSET ?"
TRIM_HOUR = f"DELETE FROM samples WHERE hour = ? AND rank > ({HOUR_CUT})"  # noqa: S608
_TRIM_EVERY_HOUR = (
    "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM (SELECT rowid, ROW_NUMBER() OVER"
    " (PARTITION BY hour ORDER BY rank) AS n FROM samples) WHERE n > ?)"
)


def open_database(path: Path, max_bytes: int | None, timeout_s: float) -> sqlite3.Connection:
    """Connect, set the pragmas, create or upgrade the schema. Raises ``sqlite3.Error``."""
    db = sqlite3.connect(path, timeout=timeout_s)
    try:
        wal = min(_MAX_WAL_BYTES, max(_MIN_WAL_BYTES, (max_bytes or 1 << 62) // 16))
        # auto_vacuum takes effect on a new file only; an older file is converted below.
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode cannot corrupt the file; a power loss may lose the last tests.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA journal_size_limit={wal}")
        page = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.execute(f"PRAGMA wal_autocheckpoint={max(16, wal // page)}")
        db.executescript(_SCHEMA)
        _upgrade(db)
        db.execute("CREATE INDEX IF NOT EXISTS samples_hour ON samples (hour, rank)")
    except BaseException:
        db.close()
        raise
    return db


def _upgrade(db: sqlite3.Connection) -> None:
    """Files of earlier versions kept every test's sample, never reused pages and had one
    representation."""
    with db:
        for table, column, declaration in _ADDED_COLUMNS:
            if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    _name_representations(db)
    with db:
        # Rows written before the upgrade have rank 0: give them a random one, then trim.
        upgraded = db.execute(
            "UPDATE samples SET hour = CAST(time / 3600 AS INTEGER),"
            " rank = random() / 18446744073709551616.0 + 0.5 WHERE rank = 0"
        ).rowcount
        if upgraded:
            db.execute(_TRIM_EVERY_HOUR, (SAMPLES_PER_HOUR,))
    if int(db.execute("PRAGMA auto_vacuum").fetchone()[0]) != 2:
        db.execute("VACUUM")  # applies auto_vacuum=INCREMENTAL to an older file
        release(db)


def _name_representations(db: sqlite3.Connection) -> None:
    """Name the representation of rows written before representations had names."""
    legacy = db.execute(
        "SELECT COUNT(*) FROM reference WHERE representation = ?", (LEGACY_REPRESENTATION,)
    ).fetchone()[0]
    with db:
        db.execute(
            "UPDATE reference SET representation = ? WHERE representation = ?",
            (UNTAGGED, LEGACY_REPRESENTATION),
        )
        db.execute("UPDATE reference SET last_used = created WHERE last_used IS NULL")
        db.execute(
            "UPDATE latest_window SET representation = ? WHERE representation IS NULL", (UNTAGGED,)
        )
        for table in ("tests", "probes"):
            db.execute(
                f"UPDATE {table} SET representation = (SELECT representation"  # noqa: S608
                f" FROM reference WHERE reference.id = {table}.reference_id)"
                " WHERE representation IS NULL"
            )
    if legacy:
        log.info("drift_state_migrated", references=int(legacy), representation=UNTAGGED)


def release(db: sqlite3.Connection) -> None:
    """Give freed pages back to the file system and truncate the WAL."""
    # executescript runs it to the end; execute() would free a single page.
    db.executescript("PRAGMA incremental_vacuum;")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def file_bytes(path: Path) -> int:
    """The database file with its WAL, shared-memory and journal files."""
    total = 0
    for name in FILES:
        try:
            total += path.with_name(name).stat().st_size
        except FileNotFoundError:
            continue
    return total


def shrink(db: sqlite3.Connection, path: Path, target_bytes: int) -> dict[str, int]:
    """Delete the oldest samples, then the oldest inactive references, then the oldest
    traffic counts, changes and tests until the files fit ``target_bytes``; rows deleted
    per table."""
    deleted = {"samples": 0, "references": 0, "traffic": 0, "changes": 0, "tests": 0}
    release(db)
    for table in deleted:
        for _ in range(_SHRINK_ROUNDS):
            size = file_bytes(path)
            if size <= target_bytes:
                return deleted
            removed = _delete_oldest(db, table, (size - target_bytes) / size)
            if not removed:
                break
            deleted[table] += removed
            release(db)
    return deleted


def _delete_oldest(db: sqlite3.Connection, table: str, share: float) -> int:
    """About ``share`` of the table's rows, at least one. ``share`` is the excess over the
    whole file, so a table that is only part of the file never loses more than needed."""
    with db:
        if table == "references":
            return db.execute(
                "DELETE FROM reference WHERE id = (SELECT MIN(id) FROM reference WHERE active = 0)"
            ).rowcount
        rows = int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608
        count = max(1, math.ceil(rows * min(share, _SHRINK_STEP)))
        return db.execute(
            f"DELETE FROM {table} WHERE rowid IN"  # noqa: S608 (one of our table names)
            f" (SELECT rowid FROM {table} ORDER BY time LIMIT ?)",
            (count,),
        ).rowcount
