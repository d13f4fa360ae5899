"""The drift worker's access to its store: a storage fault never stops the detector.

The worker tests from memory (the reference, the window); the store keeps the
results for the report, ``drift set-reference`` and the next start. Any access
may fail: a full disk, a read-only or missing directory, a corrupt file. Then:

- the failure is counted (``rag_monitor_state_write_errors_total{file,reason}``)
  and logged once per outage (``monitor.contract.state.StateDir``), the connection is
  closed and the store is tried again after ``RETRY_S``;
- meanwhile the last ``PENDING_TESTS`` test records wait in memory (the newest
  ``PENDING_SAMPLES`` with their vector samples), as do the references built
  from traffic, the latest window, the representations' hourly traffic counts and
  their changes; they are written when the store works;
- a corrupt file is moved aside (a timestamp suffix, one log line naming both
  paths) and a new one is created at once, with the references in use.

Each representation has its own reference in use; writing a new one keeps the references
of the ``keep`` most recently used representations only.

Before each write the store makes room within its share of
``service.state_max_bytes`` (the budget less every other entry of the
directory): when the files plus what the write adds while it runs (it passes
through the WAL: ``WRITE_BULGE`` times its bytes and ``WRITE_PAGES``) would pass
``PRUNE_AT`` of it, the oldest samples, then references, then tests go until
that is at ``PRUNE_TO``; after the write the WAL is checkpointed and truncated,
so the bound holds on disk during the write and at rest.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import structlog

from detectors.drift.database import FILE_NAME, FILES, file_bytes
from detectors.drift.result import DriftResult, Vectors
from detectors.drift.store import DriftStore, Reference
from monitor.contract.state import StateDir, fault_reason

log = structlog.get_logger("rag_monitor.drift")

T = TypeVar("T")
RETRY_S = 30.0
PENDING_TESTS = 1000
PENDING_SAMPLES = 8
WINDOW_EVERY_S = 60.0  # the latest window (for set-reference) is written at most this often
LOCK_TIMEOUT_S = 5.0  # a write waits this long for a report's read lock
PRUNE_AT = 0.85  # below the RagMonitorStateNearFull threshold (0.9)
PRUNE_TO = 0.75
# A write passes through the WAL before the checkpoint copies it into the file, and any
# transaction touches a few pages besides its rows (tables, indexes, pointer map, header):
# during a write the files grow by up to about WRITE_BULGE times its bytes plus WRITE_PAGES.
WRITE_BULGE = 3
WRITE_PAGES = 64 << 10


@dataclass(frozen=True, slots=True)
class PendingTest:
    """A test record not written yet."""

    result: DriftResult
    representation: str
    span: tuple[float, float]
    sample: Vectors | None
    texts: list[str | None]
    time: float


class StateWriter:
    """The worker thread's store: reads and writes that may fail, never raise."""

    def __init__(self, state: StateDir, keep: int, clock: Callable[[], float]) -> None:
        self.state = state
        self.path = state.path / FILE_NAME
        self.keep = keep
        self.clock = clock
        self.store: DriftStore | None = None
        # Per representation: the stored id of the reference in use, and that reference.
        self.reference_ids: dict[str, int] = {}
        self._in_use: dict[str, tuple[Vectors, list[str | None] | None]] = {}
        self._unwritten: set[str] = set()
        self._tests: deque[PendingTest] = deque(maxlen=PENDING_TESTS)
        self._window: tuple[Vectors, float, str] | None = None
        self._traffic: Counter[tuple[float, str]] = Counter()
        self._changes: deque[tuple[float, str, str]] = deque(maxlen=PENDING_TESTS)
        self.current: set[str] = set()  # the representations of recent traffic, tracked ones
        self._window_written = -math.inf
        self._retry_at = -math.inf
        self._prune_again_at = -math.inf
        self._over_budget = False  # logged once until the store fits again

    # --- reads -----------------------------------------------------------------------------

    def stored_reference(self, representation: str) -> Reference | None:
        """The active stored reference of ``representation``; None without a state file or
        when it cannot be read."""
        if self.store is None and not self.path.exists():
            return None  # a state file is created only when there is something to keep
        return self._run(lambda store: store.reference(representation=representation), write=False)

    def recent_representations(self) -> set[str]:
        """The representations current at the last write (none without a file): a change
        after a restart is one not among them."""
        if self.store is None and not self.path.exists():
            return set()
        return self._run(lambda store: store.recent_representations(), write=False) or set()

    def replaced_reference(self, representation: str) -> Reference | None:
        """A reference of ``representation`` stored by ``drift set-reference`` since ours."""
        self.flush()
        ours = self.reference_ids.get(representation)
        if representation in self._unwritten or ours is None or self.store is None:
            return None
        active = self._run(lambda store: store.active_reference_id(representation), write=False)
        if active is None or active == ours:
            return None
        return self._run(lambda store: store.reference(active), write=False)

    # --- writes ----------------------------------------------------------------------------

    def use_reference(
        self,
        representation: str,
        vectors: Vectors,
        texts: list[str | None] | None,
        stored_id: int | None,
    ) -> None:
        """The reference in use: read from the store (``stored_id``) or new, to be written."""
        self._in_use[representation] = (vectors, texts)
        if stored_id is None:
            self._unwritten.add(representation)
            self.reference_ids.pop(representation, None)
        else:
            self._unwritten.discard(representation)
            self.reference_ids[representation] = stored_id
            self._run(lambda store: store.touch_reference(stored_id, self.clock()), write=True)
        self.flush()

    def forget(self, representation: str) -> None:
        """A representation no longer tracked: its reference stays only in the store."""
        self._in_use.pop(representation, None)
        self._unwritten.discard(representation)

    def count(self, representation: str, at: float) -> None:
        """One vector of ``representation`` at ``at``, for the hourly traffic counts."""
        self._traffic[(at // 3600 * 3600, representation)] += 1

    def add_change(self, at: float, old: str, new: str) -> None:
        """Keep a change for the next write (a reference or a test): a producer cycling
        through model names must not cost a write each."""
        self._changes.append((at, old, new))

    def add_test(
        self,
        result: DriftResult,
        representation: str,
        *,
        span: tuple[float, float],
        sample: Vectors,
        texts: list[str | None],
        window: Vectors | None,
        now: float,
    ) -> None:
        """Keep a test record (and the tested window) and write what waits."""
        self._tests.append(PendingTest(result, representation, span, sample, texts, now))
        if len(self._tests) > PENDING_SAMPLES:  # older waiting records keep no vectors
            index = len(self._tests) - PENDING_SAMPLES - 1
            self._tests[index] = replace(self._tests[index], sample=None, texts=[])
        if window is not None:
            self._window = (window, now, representation)
        self.flush()

    def flush(self, *, final: bool = False) -> None:
        """Write what waits: the reference, the test records, the latest window when due."""
        now = self.clock()
        window_due = self._window is not None and (
            final or now - self._window_written >= WINDOW_EVERY_S
        )
        if not (self._unwritten or self._tests or window_due or self._changes):
            return
        self._make_room(self._incoming_bytes(window_due), now)
        if self._run(lambda store: self._write(store, window_due), write=True) and window_due:
            self._window_written = now

    def close(self) -> None:
        """Write what waits, one last try, and close the store."""
        self._retry_at = -math.inf
        self.flush(final=True)
        self._close_store()

    def _write(self, store: DriftStore, window_due: bool) -> bool:
        for representation in sorted(self._unwritten):
            vectors, texts = self._in_use[representation]
            self.reference_ids[representation] = store.set_reference(
                vectors, "first_traffic", representation, texts, created=self.clock()
            )
            self._unwritten.discard(representation)
            store.keep_representations(self.keep)
        while self._tests:
            test = self._tests[0]
            store.add_test(
                test.result,
                self.reference_ids.get(test.representation, 0),
                window_span=test.span,
                sample=test.sample if test.sample is not None else [],
                sample_texts=test.texts,
                now=test.time,
                representation=test.representation,
            )
            self._tests.popleft()
        while self._changes:
            store.add_change(*self._changes[0])
            self._changes.popleft()
        store.add_traffic(self._traffic)
        self._traffic.clear()
        store.set_current(self.current)
        if window_due and self._window is not None:
            vectors, at, representation = self._window
            store.save_window(vectors, representation, now=at)
            self._window = None
        store.checkpoint()  # the WAL goes back to 0 bytes at rest
        return True

    def _incoming_bytes(self, window_due: bool) -> int:
        """float32 bytes of what waits to be written."""
        values = sum(t.sample.size for t in self._tests if t.sample is not None)
        for representation in self._unwritten:
            # The reference and, at most as large, its probes.
            values += 2 * self._in_use[representation][0].size
        if window_due and self._window is not None:
            values += self._window[0].size
        return 4 * values

    def _make_room(self, incoming: int, now: float) -> None:
        """Prune before a write so that the files stay under the budget during it too."""
        if now < self._prune_again_at or not self.path.exists():
            return
        budget, room = self._budget(), WRITE_BULGE * incoming + WRITE_PAGES
        size = file_bytes(self.path)
        if size + room <= PRUNE_AT * budget:
            self._over_budget = False
            return
        target = max(int(PRUNE_TO * budget) - room, 0)
        deleted = self._run(lambda store: store.shrink(target), write=True)
        after = file_bytes(self.path)
        log.info(
            "drift_state_pruned",
            reason="size",
            bytes_before=size,
            bytes_after=after,
            budget_bytes=budget,
            deleted=deleted,
        )
        if after + room > budget:
            # What is left may not go (the reference, the probes): try again later, not per test.
            self._prune_again_at = now + RETRY_S
            if not self._over_budget:
                self._over_budget = True
                log.warning(
                    "state_over_budget",
                    file=FILE_NAME,
                    bytes=after,
                    budget_bytes=budget,
                    hint="raise service.state_max_bytes or remove other files from "
                    "service.state_dir",
                )

    # --- faults ----------------------------------------------------------------------------

    def _run(self, work: Callable[[DriftStore], T], *, write: bool) -> T | None:
        """``work`` on the open store; None when it failed (counted, logged once, retried)."""
        for _ in range(2):  # a second time only right after a corrupt file was moved aside
            now = self.clock()
            if self.store is None and now < self._retry_at:
                return None
            try:
                if self.store is None:
                    self.store = DriftStore(
                        self.state.path, max_bytes=self._budget(), timeout_s=LOCK_TIMEOUT_S
                    )
                value = work(self.store)
            except (OSError, sqlite3.Error) as error:
                if self._failed(error, now):
                    continue
                return None
            if write:
                self.state.write_succeeded(FILE_NAME)
            return value
        return None

    def _failed(self, error: OSError | sqlite3.Error, now: float) -> bool:
        """Count and close; True when a corrupt file was moved aside (try again at once)."""
        self._close_store()
        if fault_reason(error, self.state.path) == "corrupt":
            try:
                self.state.move_aside(self.path, error)
            except OSError as move_error:
                error = move_error
            else:
                # The new file must hold the references in use, or the next start rebuilds them.
                self._unwritten = set(self._in_use)
                return True
        self.state.write_failed(FILE_NAME, error)
        self._retry_at = now + RETRY_S
        return False

    def _close_store(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            with contextlib.suppress(sqlite3.Error):  # a broken connection: nothing to keep
                store.close()

    def _budget(self) -> int:
        return max(self.state.max_bytes - self.state.bytes_besides(FILES), 0)
