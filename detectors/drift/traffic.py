"""The representations' part of the drift store: vectors per hour and representation, and
each representation change (when, from, to), for the weekly report and for a restart."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping


class RepresentationLog:
    """Reads and writes of the ``traffic`` and ``changes`` tables (``DriftStore`` has them)."""

    _db: sqlite3.Connection

    def add_traffic(self, counts: Mapping[tuple[float, str], int]) -> None:
        """Add vectors counted per (hour start, representation)."""
        with self._db:
            self._db.executemany(
                "INSERT INTO traffic (time, representation, vectors) VALUES (?, ?, ?)"
                " ON CONFLICT (time, representation) DO UPDATE SET"
                " vectors = vectors + excluded.vectors",
                [(hour, name, n) for (hour, name), n in counts.items()],
            )

    def traffic(self, since: float, until: float | None = None) -> list[tuple[float, str, int]]:
        """(hour start, representation, vectors) of the hours in the period, oldest first."""
        rows = self._db.execute(
            "SELECT time, representation, vectors FROM traffic WHERE time >= ? AND time <= ?"
            " ORDER BY time, representation",
            (since, float("inf") if until is None else until),
        ).fetchall()
        return [(float(t), str(r), int(n)) for t, r, n in rows]

    def set_current(self, representations: set[str]) -> None:
        """The representations among the last ``window_size`` vectors, for the next start."""
        with self._db:
            self._db.execute("DELETE FROM current_representations")
            self._db.executemany(
                "INSERT INTO current_representations (representation) VALUES (?)",
                [(name,) for name in sorted(representations)],
            )

    def recent_representations(self) -> set[str]:
        """The representations current when the state was last written: what a restart
        continues (a change is a representation not among them)."""
        rows = self._db.execute("SELECT representation FROM current_representations").fetchall()
        return {str(r) for (r,) in rows}

    def touch_reference(self, reference_id: int, now: float) -> None:
        """A stored reference used again: its representation is among the most recent."""
        with self._db:
            self._db.execute("UPDATE reference SET last_used = ? WHERE id = ?", (now, reference_id))

    def add_change(self, at: float, old: str, new: str) -> None:
        with self._db:
            self._db.execute(
                "INSERT INTO changes (time, old_representation, new_representation)"
                " VALUES (?, ?, ?)",
                (at, old, new),
            )

    def changes(self, since: float, until: float | None = None) -> list[tuple[float, str, str]]:
        """(time, from, to) of the representation changes in the period, oldest first."""
        rows = self._db.execute(
            "SELECT time, old_representation, new_representation FROM changes"
            " WHERE time >= ? AND time <= ? ORDER BY time",
            (since, float("inf") if until is None else until),
        ).fetchall()
        return [(float(t), str(o), str(n)) for t, o, n in rows]
