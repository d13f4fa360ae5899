"""Scale-out: replicas in one consumer group add up in Prometheus, and drift runs per replica."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from tests.conftest import SidecarProcess, wait_until
from tests.integration.conftest import Broker, ends, rag_trace, traces_topic

pytestmark = pytest.mark.integration

MakeProcess = Callable[..., SidecarProcess]
DIMENSIONS = 8
DRIFT = {
    "backend": "scipy",
    "reference_size": 150,
    "window_size": 100,
    "test_every_records": 100,
    "p_value": 0.01,
    "n_permutations": 200,
}


def vectors(count: int, shift: float, rng: random.Random) -> list[list[float]]:
    return [[rng.gauss(shift, 1.0) for _ in range(DIMENSIONS)] for _ in range(count)]


def records(count: int, shift: float, rng: random.Random) -> list[bytes]:
    stages = {"retrieve": 0.05, "generate": 0.5, "total": 0.6}
    return [rag_trace(query_embedding=v, stages=stages) for v in vectors(count, shift, rng)]


def total(sidecars: list[SidecarProcess], name: str, **labels: str) -> float:
    """What Prometheus's sum over the replicas' series gives."""
    return sum(s.metric(name, **labels) for s in sidecars)


def test_two_replicas_add_up_and_each_tests_drift_on_its_partitions(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """Counters and histograms summed over two replicas equal what was sent; each replica's
    drift test stays quiet on reference traffic and flags the shift on its own share."""
    topic, settings = traces_topic(broker, partitions=4)
    config = {"collectors": {"kafka": settings}, "detectors": {"drift": DRIFT}}
    sidecars = [sidecar_process(config, name).start() for name in ("a", "b")]
    for sidecar in sidecars:
        sidecar.wait_ready()
    rng = random.Random(11)

    sent = records(600, 0.0, rng)
    placed = broker.produce(topic, sent, partitions=4)
    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed), timeout=60)
    wait_until(lambda: all(s.metric("rag_drift_tests_total") >= 1 for s in sidecars), timeout=60)
    assert [s.metric("rag_drift_detected") for s in sidecars] == [0, 0]

    shifted = records(600, 1.0, rng)
    placed += broker.produce(topic, shifted, partitions=4)
    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed), timeout=60)
    wait_until(lambda: all(s.metric("rag_drift_detected") == 1 for s in sidecars), timeout=60)

    expected = len(sent) + len(shifted)
    assert total(sidecars, "rag_requests_total", source="kafka") == expected
    assert total(sidecars, "rag_stage_latency_seconds_count", stage="total") == expected
    assert total(sidecars, "rag_stage_latency_seconds_sum", stage="generate") == pytest.approx(
        0.5 * expected
    )
    assert all(s.metric("rag_requests_total") for s in sidecars)  # both took partitions
