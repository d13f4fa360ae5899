"""Chaos, small and deterministic: while records flow, the broker goes away and comes back,
the sidecar is killed with kill -9 and started again, and its state volume fills up.
/healthz and /readyz tell the truth at each step, and every record produced is processed,
dead-lettered, or counted as refused."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from kafka.admin import KafkaAdminClient

from collectors.kafka.dead_letter import SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER
from tests.conftest import SidecarProcess, unique, wait_until
from tests.integration.conftest import (
    Broker,
    BrokerLink,
    SteadyRecords,
    ends,
    fill,
    kafka_settings,
    rag_trace,
    tmpfs,
)

pytestmark = pytest.mark.integration

MakeProcess = Callable[..., SidecarProcess]
PARTITIONS = 2
RATE = 100  # records per second
BAD_EVERY = 20  # while bad records are on, every 20th record is garbage
GRACE_S = 3.0
DRIFT = {
    "backend": "scipy",
    "reference_size": 40,
    "window_size": 20,
    "test_every_records": 20,
    "n_permutations": 50,
}
OUTCOMES = ("ok", "duplicate", "dead_lettered", "skipped", "invalid")
GARBAGE = b"not a trace"


class Records:
    """The traffic: rag-trace/1 records with a query vector (drift writes state), and while
    ``bad`` is set every ``BAD_EVERY``-th record is garbage; ``is_bad[i]`` for record i."""

    def __init__(self) -> None:
        self.bad = threading.Event()
        self.is_bad: dict[int, bool] = {}

    def __call__(self, i: int) -> bytes:
        self.is_bad[i] = self.bad.is_set() and i % BAD_EVERY == BAD_EVERY - 1
        if self.is_bad[i]:
            return GARBAGE + b" %d" % i
        vector = [random.Random(i).gauss(0, 1) for _ in range(8)]
        return rag_trace(query_embedding=vector)


def health(sidecar: SidecarProcess) -> tuple[int, int]:
    """/healthz and /readyz statuses; 0 where nothing answers."""
    return sidecar.get("/healthz")[0], sidecar.get("/readyz")[0]


def outcomes(sidecar: SidecarProcess) -> dict[str, float]:
    return {
        o: sidecar.metric("rag_monitor_records_total", collector="kafka", outcome=o)
        for o in OUTCOMES
    }


def held(clients: Broker, topic: str) -> list[tuple[int, int, bool]]:
    """Every record ``topic`` holds as (partition, offset, garbage). This, not what the
    producer placed, is what the sidecar must process: a batch in flight when the broker is
    cut may be written twice by the producer's retry (Tansu keeps both copies)."""
    return [(r.partition, r.offset, r.value.startswith(GARBAGE)) for r in clients.read(topic)]


def split(records: list[tuple[int, int, bool]], since: dict[int, int]) -> list[int]:
    """[valid, garbage] among ``records`` at or after offset ``since[partition]``."""
    counts = [0, 0]
    for partition, offset, garbage in records:
        if offset >= since.get(partition, 0):
            counts[garbage] += 1
    return counts


def test_broker_outage_kill_9_and_a_full_state_volume_lose_nothing_and_health_tells_the_truth(
    linked_broker: tuple[BrokerLink, str], sidecar_process: MakeProcess, tmp_path: Path
) -> None:
    """Under 100 records/s (every 20th garbage): the broker cut (healthz 200, readyz 503
    after the grace, 200 once back), kill -9 (nothing answers) and a restart (200/200), the
    state volume filled (write errors counted, 200/200, records still flow). The first
    process processed exactly what was produced before the kill's commit point, the second
    exactly what came after it; the dead-letter topic holds every garbage record."""
    link, bootstrap = linked_broker
    clients = Broker(bootstrap)
    topic = clients.create_topic(unique("traces"), PARTITIONS)
    settings = {
        **kafka_settings(bootstrap, [topic]),
        "ready_grace_s": GRACE_S,
        "static_membership": False,
        "consumer": {"session_timeout_ms": 3000, "heartbeat_interval_ms": 1000},
    }
    group = settings["group_id"]
    records = Records()
    started = time.monotonic()
    with tmpfs(tmp_path / "volume", "size=1m") as volume:
        config = {
            "service": {"state_dir": str(volume / "state")},
            "collectors": {"kafka": settings},
            "detectors": {"drift": DRIFT},
        }
        sidecar = sidecar_process(config)
        sidecar.start().wait_ready()
        with SteadyRecords(clients, topic, PARTITIONS, RATE, records) as traffic:
            records.bad.set()
            wait_until(lambda: outcomes(sidecar)["dead_lettered"] >= 2, timeout=30)
            # Broker stop and start. No garbage in flight at the cut: a dead letter that
            # cannot be written is skipped after its tries, and which one would be is luck.
            records.bad.clear()
            traffic.pause()  # the last batch made with garbage is placed
            traffic.resume()
            wait_until(lambda: garbage_committed(clients, group, records, traffic.placed))
            link.cut()
            wait_until(lambda: health(sidecar) == (200, 503), timeout=GRACE_S + 10)
            checks = orjson.loads(sidecar.get("/readyz")[1])["checks"]
            assert (checks["kafka"], checks["pipeline"]) == (False, True)
            link.restore()
            wait_until(lambda: health(sidecar) == (200, 200), timeout=30)
            # kafka-python 3.0.5's admin client does not reconnect after the cut.
            clients.admin.close()
            clients.admin = KafkaAdminClient(bootstrap_servers=bootstrap)

            # A checkpoint: with the producer paused and all committed, the first process
            # has processed every record exactly once (a replay counts as duplicate).
            traffic.pause()
            wait_until(lambda: clients.committed(group) == ends(topic, traffic.placed), 30)
            checkpoint = outcomes(sidecar)
            assert [checkpoint["ok"], checkpoint["dead_lettered"]] == split(
                held(clients, topic), {}
            )
            traffic.resume()
            records.bad.set()

            # kill -9 and restart with the same configuration (ports, state volume).
            wait_until(lambda: outcomes(sidecar)["ok"] >= checkpoint["ok"] + RATE, timeout=30)
            first = outcomes(sidecar)
            sidecar.kill()
            assert health(sidecar) == (0, 0)
            time.sleep(0.5)  # a commit in flight at the kill lands, or not, now
            at_kill = {tp.partition: offset for tp, offset in clients.committed(group).items()}
            sidecar.start()
            wait_until(lambda: health(sidecar) == (200, 200), timeout=60)

            # The state volume fills up: writes fail and are counted; intake goes on.
            wait_until(lambda: sidecar.metric("rag_drift_tests_total") >= 1, timeout=60)
            fill(volume)
            full = {"reason": "disk_full"}
            wait_until(lambda: sidecar.metric("rag_monitor_state_write_errors_total", **full))
            ok = outcomes(sidecar)["ok"]
            wait_until(lambda: outcomes(sidecar)["ok"] >= ok + RATE, timeout=30)
            assert health(sidecar) == (200, 200)
            assert sidecar.metric("rag_monitor_worker_up", worker="drift") == 1
        wait_until(lambda: clients.committed(group) == ends(topic, traffic.placed), timeout=60)
        second = outcomes(sidecar)
    dead = {
        (int(dict(r.headers)[SOURCE_PARTITION_HEADER]), int(dict(r.headers)[SOURCE_OFFSET_HEADER]))
        for r in clients.read(settings["dead_letter_topic"])
    }
    on_topic = held(clients, topic)
    clients.close()

    produced = len(on_topic)
    valid_after, bad_after = split(on_topic, at_kill)
    valid_before, bad_before = (
        n - after for n, after in zip(split(on_topic, {}), (valid_after, bad_after), strict=True)
    )
    # Below the kill's commit point the first process processed everything (committed means
    # finished; read just before the kill, so a record finished in between is not counted).
    assert first["ok"] >= valid_before
    assert first["dead_lettered"] >= bad_before
    # From there on the second process, each record once.
    assert [second["ok"], second["dead_lettered"], second["duplicate"]] == [
        valid_after, bad_after, 0,
    ]  # fmt: skip
    # Every garbage record reached the dead-letter topic, whichever process sent it.
    assert dead == {(partition, offset) for partition, offset, bad in on_topic if bad}
    refused = sum(n[o] for n in (first, second) for o in ("skipped", "invalid"))
    assert valid_before + second["ok"] + len(dead) + refused == produced
    assert refused == 0
    print(
        f"{produced} records ({produced - len(traffic.placed)} written twice by the producer, "
        f"{len(dead)} garbage) in {time.monotonic() - started:.0f} s; "
        f"read again after the broker outage {checkpoint['duplicate']:.0f}, after the kill "
        f"{first['ok'] + first['dead_lettered'] - valid_before - bad_before:.0f}"
    )


def garbage_committed(
    clients: Broker, group: str, records: Records, placed: list[tuple[int, int]]
) -> bool:
    """Every garbage record placed so far lies below its partition's committed offset."""
    committed = {tp.partition: offset for tp, offset in clients.committed(group).items()}
    return all(
        committed.get(partition, 0) > offset
        for i, (partition, offset) in enumerate(placed)
        if records.is_bad[i]
    )
