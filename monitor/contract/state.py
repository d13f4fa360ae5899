"""The state directory (``service.state_dir``): its size budget, its accounting, its write faults.

Everything the sidecar keeps on disk lives in one directory with one budget,
``service.state_max_bytes``. A ``StateDir`` is shared by everything that writes
there (one per sidecar, ``SidecarRegistry.state_dir``) and exports:

- ``rag_monitor_state_bytes{file}``: bytes of each top-level entry (a folder
  counts with everything under it), read at scrape time, WAL and journal files
  included; ``sum`` gives the total;
- ``rag_monitor_state_max_bytes``: the budget, so a rule compares without a constant;
- ``rag_monitor_state_write_errors_total{file,reason}``: failed write attempts.

A writer that fails reports it with ``write_failed``: the error is counted and
logged once per outage (one JSON line, no traceback); ``write_succeeded`` after a
failure logs the recovery. A file that cannot be read as what it should be is
moved aside with ``move_aside`` (a timestamp suffix) so that it can be recreated.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from monitor.contract.names import STATE_BYTES, STATE_MAX_BYTES, STATE_WRITE_ERRORS_TOTAL

log = structlog.get_logger("rag_monitor.state")

DEFAULT_STATE_MAX_BYTES = 1 << 30
MOVED_ASIDE = ".corrupt-"  # name.corrupt-20250101T120000Z

_SQLITE_REASONS = {
    "SQLITE_FULL": "disk_full",
    "SQLITE_READONLY": "read_only",
    "SQLITE_CORRUPT": "corrupt",
    "SQLITE_NOTADB": "corrupt",
    "SQLITE_BUSY": "locked",
    "SQLITE_LOCKED": "locked",
    "SQLITE_CANTOPEN": "cannot_open",
    "SQLITE_PERM": "permission_denied",
    "SQLITE_IOERR": "io_error",
}
_OS_REASONS = {
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EROFS: "read_only",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.ENOTDIR: "not_a_directory",
    errno.EEXIST: "not_a_directory",  # mkdir over a file
}


def fault_reason(error: BaseException, directory: Path | None = None) -> str:
    """A short label for a write error: disk_full, read_only, corrupt, not_a_directory, ...

    SQLite answers "unable to open database file" for a read-only or missing
    directory alike, so that case looks at the directory itself.
    """
    if isinstance(error, sqlite3.Error):
        # Extended codes (SQLITE_IOERR_WRITE, SQLITE_READONLY_DBMOVED) share their base's reason.
        base = "_".join(str(getattr(error, "sqlite_errorname", "")).split("_")[:2])
        reason = _SQLITE_REASONS.get(base, "")
        if reason == "cannot_open" and directory is not None:
            return _directory_reason(directory) or reason
        return reason or "other"
    if isinstance(error, OSError):
        return _OS_REASONS.get(error.errno or 0, "io_error")
    return "other"


def _directory_reason(directory: Path) -> str | None:
    if directory.exists() and not directory.is_dir():
        return "not_a_directory"
    if any(parent.is_file() for parent in directory.parents):
        return "not_a_directory"
    if directory.is_dir() and not os.access(directory, os.W_OK):
        return "read_only"  # access() answers EROFS on a read-only mount, even for root
    return None


class StateDir:
    """The budget and the accounting of one state directory; thread-safe."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_STATE_MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}
        self._failing: dict[str, set[str]] = {}  # file -> reasons logged in this outage

    def usage(self) -> dict[str, int]:
        """Bytes of each top-level entry; empty when the directory cannot be read."""
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return {}
        return {entry.name: _entry_bytes(entry) for entry in entries}

    def bytes_besides(self, names: Iterable[str]) -> int:
        """Bytes of every entry except ``names``: what the rest of the budget already holds."""
        skip = set(names)
        return sum(size for name, size in self.usage().items() if name not in skip)

    # --- faults -----------------------------------------------------------------------------

    def write_failed(self, file: str, error: BaseException) -> str:
        """Count a failed write of ``file``; log it once per outage and reason. Its reason."""
        reason = fault_reason(error, self.path)
        with self._lock:
            key = (file, reason)
            self._errors[key] = self._errors.get(key, 0) + 1
            logged = self._failing.setdefault(file, set())
            first = reason not in logged
            logged.add(reason)
        if first:
            log.warning(
                "state_write_failed",
                file=file,
                directory=str(self.path),
                reason=reason,
                error=f"{type(error).__name__}: {error}",
                hint="counted in rag_monitor_state_write_errors_total; retried, "
                "work goes on from memory meanwhile",
            )
        return reason

    def write_succeeded(self, file: str) -> None:
        """A write of ``file`` worked: after failures, one line says so."""
        with self._lock:
            reasons = self._failing.pop(file, None)
        if reasons:
            log.info("state_write_recovered", file=file, after=sorted(reasons))

    def move_aside(self, path: Path, error: BaseException) -> Path:
        """Rename ``path`` (and its -wal, -shm, -journal files) with a timestamp suffix so
        that it can be recreated; counted, one log line names both paths. Older moved-aside
        copies of it are deleted: the newest is kept for a person to look at."""
        reason = fault_reason(error, self.path)
        with self._lock:
            key = (path.name, reason)
            self._errors[key] = self._errors.get(key, 0) + 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for old in path.parent.glob(f"{path.name}{MOVED_ASIDE}*"):
            old.unlink(missing_ok=True)
        target = path.with_name(f"{path.name}{MOVED_ASIDE}{stamp}")
        for suffix in ("", "-wal", "-shm", "-journal"):
            source = path.with_name(path.name + suffix)
            if source.exists():
                source.rename(target.with_name(target.name + suffix))
        log.error(
            "state_file_moved_aside",
            file=path.name,
            path=str(path),
            moved_to=str(target),
            reason=reason,
            error=f"{type(error).__name__}: {error}",
            hint="a new, empty file is created in its place; the moved copy counts toward "
            "service.state_max_bytes until it is deleted",
        )
        return target

    # --- prometheus_client Collector --------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        size, budget, errors = self._families()
        for name, value in sorted(self.usage().items()):
            size.add_metric([name], value)
        budget.add_metric([], self.max_bytes)
        with self._lock:
            counts = dict(self._errors)
        for (file, reason), count in sorted(counts.items()):
            errors.add_metric([file, reason], count)
        return [size, budget, errors]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        size = GaugeMetricFamily(
            STATE_BYTES,
            "Bytes of each entry of service.state_dir (WAL and journal files included); "
            "sum them for the directory.",
            labels=["file"],
        )
        budget = GaugeMetricFamily(
            STATE_MAX_BYTES,
            "service.state_max_bytes: the budget of service.state_dir.",
        )
        errors = CounterMetricFamily(
            STATE_WRITE_ERRORS_TOTAL,
            "Failed writes to service.state_dir by file and reason (disk_full, read_only, "
            "corrupt, not_a_directory, permission_denied, locked, io_error, ...).",
            labels=["file", "reason"],
        )
        return size, budget, errors


def _entry_bytes(entry: os.DirEntry[str]) -> int:
    try:
        if entry.is_dir(follow_symlinks=False):
            return sum(_entry_bytes(child) for child in os.scandir(entry.path))
        return entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0  # removed while it was read
