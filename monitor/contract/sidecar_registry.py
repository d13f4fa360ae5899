"""The registry of one running sidecar, and what its components share through it.

The sidecar builds one ``SidecarRegistry`` and hands it to every component
(``BuildContext.registry``, ``CollectorContext.pipeline.metrics.registry``). Besides
being the Prometheus registry its ``/metrics`` serves, it holds what several
components of that sidecar use together: the metric families more than one of them
writes (prometheus_client refuses a second registration of a name), the worker
supervisor that answers ``/healthz``, the byte budgets its receivers share, and the
state directory. All of it belongs to this object, not to the module: two sidecars in
one process (the tests run several) share nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.contract.inflight import ByteBudget
from monitor.contract.names import INFLIGHT_BYTES, INFLIGHT_MAX_BYTES
from monitor.contract.state import StateDir
from monitor.contract.worker import Supervisor

_Metric = TypeVar("_Metric", Counter, Gauge)


class SidecarRegistry(CollectorRegistry):
    """A Prometheus registry that also keeps what the components of its sidecar share."""

    def __init__(self) -> None:
        super().__init__()
        # Not ``_lock``: that name is the base registry's own lock.
        self._shared_lock = threading.Lock()
        self._families: dict[str, Any] = {}
        self._budgets: dict[str, ByteBudget] = {}
        self._state_dir: StateDir | None = None
        # Every worker started with this sidecar reports here; /healthz asks it.
        self.supervisor = Supervisor()
        self.register(self.supervisor)

    def family(
        self, kind: type[_Metric], name: str, documentation: str, labelnames: Sequence[str]
    ) -> _Metric:
        """The metric family ``name``, registered on first use and handed out again after:
        for a family that several components write, each under its own labels."""
        with self._shared_lock:
            if name not in self._families:
                self._families[name] = kind(name, documentation, labelnames, registry=self)
            metric: _Metric = self._families[name]
            return metric

    def budget(self, name: str, limit: int) -> ByteBudget:
        """The byte budget ``name``: receivers that ask for the same name share one (the
        OTLP/HTTP and OTLP/gRPC receivers); the first caller's ``limit`` holds."""
        with self._shared_lock:
            found = self._budgets.get(name)
            if found is not None:
                return found
            found = self._budgets[name] = ByteBudget(name, limit)
        self.family(
            Gauge,
            INFLIGHT_BYTES,
            "Bytes reserved by requests in flight (bodies being read, waiting for or in "
            "a handler, and their decoding), by budget.",
            ["budget"],
        ).labels(name).set_function(lambda: found.reserved)
        self.family(
            Gauge,
            INFLIGHT_MAX_BYTES,
            "The budget of bytes in flight: past it new requests are refused (503, "
            "RESOURCE_EXHAUSTED).",
            ["budget"],
        ).labels(name).set(limit)
        return found

    def state_dir(self, path: Path, max_bytes: int) -> StateDir:
        """The state directory every writer of this sidecar shares (one budget); the first
        caller's ``path`` and ``max_bytes`` hold (all come from ``service:``)."""
        with self._shared_lock:
            if self._state_dir is None:
                self._state_dir = StateDir(path, max_bytes)
                self.register(self._state_dir)
            return self._state_dir
