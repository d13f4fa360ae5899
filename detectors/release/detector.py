"""Releases: which ``service.version`` each service runs, and since when.

``rag_release_info{service,version,environment}`` is 1 for each version seen (per
environment), ``rag_release_first_seen_timestamp_seconds{service,version}`` when this
replica first saw it (the trace's time, never later than now). Every replica reports
its own first sight; the rules take the earliest (``min by (service, version)``).

Bounded: the ``max_versions_per_service`` most recently seen versions of each service
(the least recently seen one's series are removed), ``MAX_ENVIRONMENTS_PER_VERSION``
environments a version, and ``max_services`` services (traces of further services are
not exported). Each refusal is counted in ``rag_release_dropped_total{reason}``.
A trace without a version adds nothing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar

from prometheus_client import Counter, Gauge

from detectors.release.config import ReleaseConfig
from detectors.release.names import (
    RELEASE_DROPPED_TOTAL,
    RELEASE_FIRST_SEEN_TIMESTAMP_SECONDS,
    RELEASE_INFO,
)
from monitor.contract.detector import InlineDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace

UNKNOWN_SERVICE = "unknown_service"  # what OTel SDKs report without service.name
MAX_ENVIRONMENTS_PER_VERSION = 4
DROP_REASONS = ("version_evicted", "service_over_limit", "environment_over_limit")


class ReleaseDetector(InlineDetector):
    """Exports the versions each service runs and when each was first seen."""

    name: ClassVar[str] = "release"

    def __init__(
        self,
        config: ReleaseConfig,
        registry: SidecarRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._info = Gauge(
            RELEASE_INFO,
            "1 for each service.version (and deployment.environment) seen recently.",
            ["service", "version", "environment"],
            registry=registry,
        )
        self._first_seen = Gauge(
            RELEASE_FIRST_SEEN_TIMESTAMP_SECONDS,
            "Unix time this replica first saw the service.version (take the min over replicas).",
            ["service", "version"],
            registry=registry,
        )
        dropped = Counter(
            RELEASE_DROPPED_TOTAL,
            "Release series not exported: an evicted version, a service or an "
            "environment over its limit.",
            ["reason"],
            registry=registry,
        )
        self._dropped = {reason: dropped.labels(reason) for reason in DROP_REASONS}
        self._max_versions = config.max_versions_per_service
        self._max_services = config.max_services
        self._clock = clock
        # service -> version -> (first seen, environments), least recently seen first
        self._versions: dict[str, OrderedDict[str, tuple[float, set[str]]]] = {}

    def observe(self, trace: RagTrace) -> None:
        version = trace.service_version
        if version is None:
            return
        service = trace.service_name or UNKNOWN_SERVICE
        versions = self._versions.get(service)
        if versions is None:
            if len(self._versions) >= self._max_services:
                self._dropped["service_over_limit"].inc()
                return
            versions = self._versions[service] = OrderedDict()
        seen_at = min(trace.time.timestamp(), self._clock())
        known = versions.get(version)
        if known is None:
            known = versions[version] = (seen_at, set())
            self._first_seen.labels(service, version).set(seen_at)
            if len(versions) > self._max_versions:
                self._evict(service, versions)
        else:
            versions.move_to_end(version)
            if seen_at < known[0]:  # a late trace of the version: it was there earlier
                known = versions[version] = (seen_at, known[1])
                self._first_seen.labels(service, version).set(seen_at)
        self._add_environment(service, version, known[1], trace.deployment_environment or "")

    def _add_environment(
        self, service: str, version: str, environments: set[str], environment: str
    ) -> None:
        if environment in environments:
            return
        if len(environments) >= MAX_ENVIRONMENTS_PER_VERSION:
            self._dropped["environment_over_limit"].inc()
            return
        environments.add(environment)
        self._info.labels(service, version, environment).set(1)

    def _evict(self, service: str, versions: OrderedDict[str, tuple[float, set[str]]]) -> None:
        """Removes the least recently seen version's series."""
        version, (_, environments) = versions.popitem(last=False)
        self._first_seen.remove(service, version)
        for environment in environments:
            self._info.remove(service, version, environment)
        self._dropped["version_evicted"].inc()
