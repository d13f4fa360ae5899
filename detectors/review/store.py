"""The review queue: items and verdicts in ``state_dir/review.sqlite3``.

One connection behind one lock: the detector's worker writes, the reviewer's page
reads and records verdicts, the Kafka reader adds what other replicas queued.
Items and verdicts are also the JSON records of the ``review`` topics
(``item_record`` / ``verdict_record``, schema ``rag-review/1``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import orjson

from detectors.review.model import (
    EVALUATION_OUTCOMES,
    MAX_ITEM_EVALUATIONS,
    REASONS,
    STRATA,
    SUPPORTED,
    EvaluationOutcome,
    Progress,
    Reason,
    ReviewContext,
    ReviewItem,
    Stratum,
    Supported,
    Verdict,
    with_evaluation,
)
from monitor.contract.slicing import slices_from_record, slices_record
from monitor.contract.trace import (
    Spans,
    TierVerdict,
    spans_from_record,
    tiers_from_record,
    verdict_parts_record,
)

FILE_NAME = "review.sqlite3"
ITEM_SCHEMA = "rag-review/1"
VERDICT_SCHEMA = "rag-review-verdict/1"

_TABLES = """
CREATE TABLE IF NOT EXISTS items (
    trace_id TEXT PRIMARY KEY,
    queued_at REAL NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS items_queued_at ON items (queued_at);
CREATE TABLE IF NOT EXISTS item_strata (
    trace_id TEXT NOT NULL REFERENCES items (trace_id) ON DELETE CASCADE,
    stratum TEXT NOT NULL,
    PRIMARY KEY (trace_id, stratum)
);
CREATE TABLE IF NOT EXISTS verdicts (
    trace_id TEXT PRIMARY KEY REFERENCES items (trace_id) ON DELETE CASCADE,
    reviewed_at REAL NOT NULL,
    body BLOB NOT NULL
);
"""


def item_record(item: ReviewItem) -> dict[str, Any]:
    """The JSON record of an item (``rag-review/1``): the store's body and the topic's value."""
    return {
        "schema": ITEM_SCHEMA,
        "trace_id": item.trace_id,
        "time": item.time,
        "query": item.query,
        "answer": item.answer,
        "contexts": [
            {"doc_id": c.doc_id, "chunk_id": c.chunk_id, "text": c.text} for c in item.contexts
        ],
        "tenant": item.tenant,
        "session_id": item.session_id,
        "strata": list(item.strata),
        "hhem_score": item.hhem_score,
        "hhem_threshold": item.hhem_threshold,
        "judge": item.judge,
        **verdict_parts_record(item.spans, item.tiers),
        **({"slices": slices_record(item.slices)} if item.slices else {}),
        "feedback": list(item.feedback),
        "evaluations": dict(item.evaluations),
        "queued_at": item.queued_at,
    }


def item_from_record(record: Mapping[str, Any]) -> ReviewItem:
    """An item from its JSON record; ``ValueError`` (or ``KeyError``/``TypeError``) if malformed."""
    if record.get("schema") != ITEM_SCHEMA:
        raise ValueError(f"schema is not {ITEM_SCHEMA}")
    strata = tuple(s for s in record["strata"] if s in STRATA)
    return ReviewItem(
        trace_id=str(record["trace_id"]),
        time=float(record["time"]),
        query=str(record["query"]),
        answer=str(record["answer"]),
        contexts=tuple(
            ReviewContext(str(c["doc_id"]), c.get("chunk_id"), c.get("text"))
            for c in record["contexts"]
        ),
        tenant=record.get("tenant"),
        session_id=record.get("session_id"),
        strata=cast("tuple[Stratum, ...]", strata),
        hhem_score=_optional_float(record.get("hhem_score")),
        hhem_threshold=_optional_float(record.get("hhem_threshold")),
        judge=None if record.get("judge") is None else str(record["judge"]),
        spans=spans_from_record(record.get("spans", [])),
        tiers=tiers_from_record(record.get("tiers", [])),
        slices=slices_from_record(record.get("slices", [])),
        feedback=tuple(str(kind) for kind in record.get("feedback", ())),
        evaluations=_evaluations(record.get("evaluations", {})),
        queued_at=float(record.get("queued_at", 0.0)),
    )


def _evaluations(given: Any) -> tuple[tuple[str, EvaluationOutcome], ...]:
    """The outcomes of a record (absent in records written before they were kept); an
    outcome other than pass or fail is left out, and at most ``MAX_ITEM_EVALUATIONS`` kept."""
    if not isinstance(given, Mapping):
        raise TypeError("evaluations is not an object")
    kept = [(str(name), cast("EvaluationOutcome", outcome)) for name, outcome in given.items()]
    return tuple((n, o) for n, o in kept if o in EVALUATION_OUTCOMES)[:MAX_ITEM_EVALUATIONS]


def verdict_record(verdict: Verdict) -> dict[str, Any]:
    """The JSON record of a verdict (``rag-review-verdict/1``)."""
    return {
        "schema": VERDICT_SCHEMA,
        "trace_id": verdict.trace_id,
        "supported": verdict.supported,
        "relevant_doc_ids": list(verdict.relevant_doc_ids),
        "missing_doc_ids": list(verdict.missing_doc_ids),
        "reason": verdict.reason,
        "note": verdict.note,
        "reviewer": verdict.reviewer,
        "reviewed_at": verdict.reviewed_at,
    }


def verdict_from_record(record: Mapping[str, Any]) -> Verdict:
    """A verdict from its JSON record; ``ValueError`` if malformed."""
    if record.get("schema") != VERDICT_SCHEMA:
        raise ValueError(f"schema is not {VERDICT_SCHEMA}")
    supported, reason = record["supported"], record.get("reason")
    if supported not in SUPPORTED or (reason is not None and reason not in REASONS):
        raise ValueError("supported or reason is not one of the known values")
    return Verdict(
        trace_id=str(record["trace_id"]),
        supported=cast("Supported", supported),
        relevant_doc_ids=tuple(str(d) for d in record.get("relevant_doc_ids", ())),
        missing_doc_ids=tuple(str(d) for d in record.get("missing_doc_ids", ())),
        reason=cast("Reason | None", reason),
        note=str(record.get("note", "")),
        reviewer=record.get("reviewer"),
        reviewed_at=float(record.get("reviewed_at", 0.0)),
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def merge_items(held: ReviewItem, new: ReviewItem) -> ReviewItem:
    """``held`` with the strata, score, feedback kinds and evaluation outcomes ``new`` adds."""
    return replace(
        held,
        strata=held.strata + tuple(s for s in new.strata if s not in held.strata),
        hhem_score=held.hhem_score if held.hhem_score is not None else new.hhem_score,
        hhem_threshold=(
            held.hhem_threshold if held.hhem_threshold is not None else new.hhem_threshold
        ),
        judge=held.judge if held.hhem_score is not None else new.judge,
        spans=held.spans if held.hhem_score is not None else new.spans,
        tiers=held.tiers if held.hhem_score is not None else new.tiers,
        feedback=held.feedback + tuple(k for k in new.feedback if k not in held.feedback),
        # A later outcome replaces an earlier one, also when it arrives as a whole record
        # (a replica attached a later result and published the item again).
        evaluations=_evaluations({**dict(held.evaluations), **dict(new.evaluations)}),
    )


class ReviewStore:
    """Queued items and verdicts in SQLite; thread-safe (one lock)."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILE_NAME
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_TABLES)

    def add(self, item: ReviewItem) -> bool:
        """Queue ``item`` (``queued_at`` set from the clock when 0); False when the trace is
        already queued: its strata, score and feedback kinds are merged into the held one."""
        with self._lock, self._db:
            held = self._get(item.trace_id)
            if held is not None:
                self._put(merge_items(held, item), new=False)
                return False
            if not item.queued_at:
                item = replace(item, queued_at=self._clock())
            self._put(item, new=True)
            return True

    def attach_score(
        self,
        trace_id: str,
        score: float,
        threshold: float,
        judge: str = "hhem",
        *,
        spans: Spans = (),
        tiers: tuple[TierVerdict, ...] = (),
    ) -> None:
        """The judge's score of a queued item, with its spans and tiers (a later score
        replaces all of them)."""
        self._update(
            trace_id,
            lambda i: replace(
                i,
                hhem_score=score,
                hhem_threshold=threshold,
                judge=judge,
                spans=spans,
                tiers=tiers,
            ),
        )

    def attach_feedback(self, trace_id: str, kind: str) -> None:
        """A feedback kind seen for a queued item (each kind once)."""
        self._update(
            trace_id,
            lambda i: i if kind in i.feedback else replace(i, feedback=(*i.feedback, kind)),
        )

    def attach_evaluation(self, trace_id: str, name: str, outcome: EvaluationOutcome) -> None:
        """An evaluation's outcome for a queued item (a later one replaces it)."""
        self._update(trace_id, lambda i: with_evaluation(i, name, outcome))

    def next_unreviewed(self, skip: Sequence[str] = ()) -> ReviewItem | None:
        """The oldest item without a verdict, except the trace ids in ``skip``."""
        # The first unreviewed item not skipped is among the first len(skip) + 1.
        skipped = set(skip)
        with self._lock:
            rows = self._db.execute(
                "SELECT i.trace_id, i.body FROM items i "
                "LEFT JOIN verdicts v ON v.trace_id = i.trace_id WHERE v.trace_id IS NULL "
                "ORDER BY i.queued_at, i.rowid LIMIT ?",
                (len(skipped) + 1,),
            ).fetchall()
        row = next((body for trace_id, body in rows if trace_id not in skipped), None)
        return None if row is None else item_from_record(orjson.loads(row))

    def get(self, trace_id: str) -> ReviewItem | None:
        with self._lock:
            return self._get(trace_id)

    def record(self, verdict: Verdict) -> ReviewItem | None:
        """Store ``verdict`` (a later one replaces it; ``reviewed_at`` set from the clock when
        0); the item it is about, None (nothing stored) when that is not queued."""
        if not verdict.reviewed_at:
            verdict = replace(verdict, reviewed_at=self._clock())
        with self._lock, self._db:
            item = self._get(verdict.trace_id)
            if item is None:
                return None
            self._db.execute(
                "INSERT OR REPLACE INTO verdicts (trace_id, reviewed_at, body) VALUES (?, ?, ?)",
                (verdict.trace_id, verdict.reviewed_at, orjson.dumps(verdict_record(verdict))),
            )
            return item

    def verdict(self, trace_id: str) -> Verdict | None:
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM verdicts WHERE trace_id = ?", (trace_id,)
            ).fetchone()
        return None if row is None else verdict_from_record(orjson.loads(row[0]))

    def progress(self) -> Progress:
        """Per stratum: items queued (an item counts in each of its strata) and reviewed."""
        with self._lock:
            rows = self._db.execute(
                "SELECT s.stratum, COUNT(*), COUNT(v.trace_id) FROM item_strata s "
                "LEFT JOIN verdicts v ON v.trace_id = s.trace_id GROUP BY s.stratum"
            ).fetchall()
        counts = {stratum: (queued, reviewed) for stratum, queued, reviewed in rows}
        return Progress(
            queued={s: counts.get(s, (0, 0))[0] for s in STRATA},
            reviewed={s: counts.get(s, (0, 0))[1] for s in STRATA},
        )

    def reviewed(self) -> list[tuple[ReviewItem, Verdict]]:
        """Every reviewed item with its verdict, oldest review first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT i.body, v.body FROM verdicts v JOIN items i ON i.trace_id = v.trace_id "
                "ORDER BY v.reviewed_at, v.rowid"
            ).fetchall()
        return [
            (item_from_record(orjson.loads(item)), verdict_from_record(orjson.loads(verdict)))
            for item, verdict in rows
        ]

    def delete_older_than(self, cutoff: float) -> int:
        """Retention: delete the items queued before ``cutoff`` with their verdicts; how many."""
        with self._lock, self._db:
            deleted = self._db.execute("DELETE FROM items WHERE queued_at < ?", (cutoff,)).rowcount
        return int(deleted)

    def count(self) -> int:
        """Items queued."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def close(self) -> None:
        """Close the database; safe twice."""
        with self._lock:
            self._db.close()

    # --- under the lock ------------------------------------------------------------------

    def _get(self, trace_id: str) -> ReviewItem | None:
        row = self._db.execute("SELECT body FROM items WHERE trace_id = ?", (trace_id,)).fetchone()
        return None if row is None else item_from_record(orjson.loads(row[0]))

    def _put(self, item: ReviewItem, *, new: bool) -> None:
        body = orjson.dumps(item_record(item))
        if new:
            self._db.execute(
                "INSERT INTO items (trace_id, queued_at, body) VALUES (?, ?, ?)",
                (item.trace_id, item.queued_at, body),
            )
        else:
            self._db.execute("UPDATE items SET body = ? WHERE trace_id = ?", (body, item.trace_id))
        self._db.executemany(
            "INSERT OR IGNORE INTO item_strata (trace_id, stratum) VALUES (?, ?)",
            [(item.trace_id, stratum) for stratum in item.strata],
        )

    def _update(self, trace_id: str, change: Callable[[ReviewItem], ReviewItem]) -> None:
        with self._lock, self._db:
            held = self._get(trace_id)
            if held is not None:
                self._put(change(held), new=False)
