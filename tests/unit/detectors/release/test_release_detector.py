"""The release detector: versions and first sights per service, bounded and counted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from detectors.release.config import ReleaseConfig
from detectors.release.detector import MAX_ENVIRONMENTS_PER_VERSION, ReleaseDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from tests.conftest import sample

NOW = 1_800_000_000.0


def trace(
    version: str | None,
    service: str | None = "rag-api",
    environment: str | None = "prod",
    at: float = NOW,
) -> RagTrace:
    return RagTrace(
        trace_id="ab",
        time=datetime.fromtimestamp(at, tz=UTC),
        source="otlp",
        service_name=service,
        service_version=version,
        deployment_environment=environment,
    )


def detector(**config: int) -> tuple[ReleaseDetector, SidecarRegistry]:
    registry = SidecarRegistry()
    return ReleaseDetector(ReleaseConfig(**config), registry, clock=lambda: NOW), registry


def first_seen(registry: SidecarRegistry, service: str, version: str) -> float | None:
    return registry.get_sample_value(
        "rag_release_first_seen_timestamp_seconds", {"service": service, "version": version}
    )


def info_series(registry: SidecarRegistry) -> set[tuple[str, ...]]:
    return {
        (s.labels["service"], s.labels["version"], s.labels["environment"])
        for metric in registry.collect()
        if metric.name == "rag_release_info"
        for s in metric.samples
    }


def test_a_version_is_exported_with_its_first_sight() -> None:
    """info = 1 per service, version and environment; first seen is the earliest trace time."""
    release, registry = detector()
    release.observe(trace("2.0.0", at=NOW - 60))
    release.observe(trace("2.0.0", at=NOW - 120))  # a late trace: the version was there earlier
    release.observe(trace("2.0.0", environment=None, at=NOW + 3600))  # a clock ahead: now
    assert first_seen(registry, "rag-api", "2.0.0") == NOW - 120
    assert info_series(registry) == {("rag-api", "2.0.0", "prod"), ("rag-api", "2.0.0", "")}
    release.observe(trace("2.1.0", service=None, at=NOW + 3600))
    assert first_seen(registry, "unknown_service", "2.1.0") == NOW


def test_a_trace_without_a_version_adds_nothing() -> None:
    """No service.version: no series, nothing counted."""
    release, registry = detector()
    release.observe(trace(None))
    assert info_series(registry) == set()
    assert sample(registry, "rag_release_dropped_total", reason="service_over_limit") == 0


def test_the_least_recently_seen_version_goes_beyond_the_limit() -> None:
    """max_versions_per_service keeps the recently seen versions; the evicted one's series go."""
    release, registry = detector(max_versions_per_service=2)
    for version in ("1", "2", "1", "3"):  # 1 was seen again after 2: 2 is the one to go
        release.observe(trace(version))
    assert info_series(registry) == {("rag-api", "1", "prod"), ("rag-api", "3", "prod")}
    assert first_seen(registry, "rag-api", "2") is None
    assert first_seen(registry, "rag-api", "1") == NOW
    assert sample(registry, "rag_release_dropped_total", reason="version_evicted") == 1


def test_services_beyond_the_limit_are_counted_not_exported() -> None:
    """max_services bounds the services; traces of further ones are counted per trace."""
    release, registry = detector(max_services=2)
    for service in ("a", "b", "c", "c", "a"):
        release.observe(trace("1", service=service))
    assert {s for s, _, _ in info_series(registry)} == {"a", "b"}
    assert sample(registry, "rag_release_dropped_total", reason="service_over_limit") == 2


def test_environments_of_a_version_are_bounded() -> None:
    """At most MAX_ENVIRONMENTS_PER_VERSION environments a version; the rest are counted."""
    release, registry = detector()
    for index in range(MAX_ENVIRONMENTS_PER_VERSION + 3):
        release.observe(trace("1", environment=f"env{index}"))
    assert len(info_series(registry)) == MAX_ENVIRONMENTS_PER_VERSION
    assert sample(registry, "rag_release_dropped_total", reason="environment_over_limit") == 3


def test_series_stay_bounded_under_random_versions() -> None:
    """10,000 traces of random services and versions: at most max_services x max_versions."""
    import random

    rng = random.Random(7)
    release, registry = detector(max_versions_per_service=3, max_services=4)
    for _ in range(10_000):
        release.observe(trace(str(rng.randrange(50)), service=f"s{rng.randrange(10)}"))
    assert len(info_series(registry)) <= 4 * 3
    assert len(info_series(registry)) == 12


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_versions_per_service", 0), ("max_services", 0)],
    ids=["no-versions", "no-services"],
)
def test_limits_must_be_positive(key: str, value: int) -> None:
    """A zero limit is a config error."""
    with pytest.raises(ValueError, match=key):
        ReleaseConfig.model_validate({key: value})
