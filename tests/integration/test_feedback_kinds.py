"""The method's feedback kinds end to end: POST /v1/feedback and the Kafka feedback topic
into a real sidecar (and a real broker), counted under bounded labels; bad values refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from kafka import TopicPartition

from collectors.kafka.dead_letter import REASON_HEADER, SOURCE_OFFSET_HEADER
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, unique, wait_until
from tests.integration.conftest import Broker, kafka_settings, post

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
JSON = "application/json"

GOOD: list[Any] = [
    {"trace_id": "t1", "kind": "click", "doc_id": "d7"},
    {"trace_id": "t1", "kind": "dwell", "dwell_seconds": 42.5},
    [
        {"trace_id": "t2", "kind": "share"},
        {"trace_id": "t2", "kind": "export"},
        {"trace_id": "t3", "kind": "re_ask", "session_id": "s1"},
        {"trace_id": "t3", "kind": "thumbs_down", "reason": "incomplete"},
        {"trace_id": "t4", "kind": "thumbs_down"},
    ],
]
# Each bad body also holds a valid record when it is a list: it is refused whole,
# and nothing of it is counted (the client, or the dead-letter topic, keeps it all).
BAD: list[Any] = [
    {"trace_id": "t1", "kind": "like"},
    {"trace_id": "t1", "kind": "click"},
    {"trace_id": "t1", "kind": "dwell", "dwell_seconds": -3},
    {"trace_id": "t1", "kind": "thumbs_down", "reason": "the refund period is wrong"},
    [{"trace_id": "t5", "kind": "share"}, {"trace_id": "t5", "kind": "click", "doc_id": "d" * 300}],
]
NAN_DWELL = b'{"trace_id": "t1", "kind": "dwell", "dwell_seconds": NaN}'


def _assert_counted(sidecar: Sidecar) -> None:
    """Exactly the GOOD records, under their kinds, reasons and the dwell histogram."""
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_monitor_events_total", type="feedback") == 7)
    kinds = {"click": 1, "dwell": 1, "share": 1, "export": 1, "re_ask": 1, "thumbs_down": 2}
    for kind, count in kinds.items():
        assert sample(registry, "rag_feedback_events_total", kind=kind) == count, kind
    assert sample(registry, "rag_feedback_thumbs_down_total", reason="incomplete") == 1
    assert sample(registry, "rag_feedback_thumbs_down_total", reason="unspecified") == 1
    assert sample(registry, "rag_feedback_dwell_seconds_count") == 1
    assert sample(registry, "rag_feedback_dwell_seconds_sum") == 42.5
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="30.0") == 0
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="60.0") == 1


def test_v1_feedback_accepts_every_kind_and_refuses_bad_values(start_sidecar: StartSidecar) -> None:
    """Good bodies get 200 with their count; each bad one a 400 naming the field, counted invalid."""
    sidecar = start_sidecar()
    for body in GOOD:
        status, answer, _ = post(sidecar, "/v1/feedback", orjson.dumps(body), JSON)
        assert (status, orjson.loads(answer)) == (
            200,
            {"accepted": len(body) if isinstance(body, list) else 1},
        )
    answers = [post(sidecar, "/v1/feedback", orjson.dumps(body), JSON)[:2] for body in BAD]
    answers.append(post(sidecar, "/v1/feedback", NAN_DWELL, JSON)[:2])
    assert [status for status, _ in answers] == [400] * 6
    messages = [answer.decode() for _, answer in answers]
    for field, message in zip(["kind", "doc_id", "dwell_seconds", "reason", "1.doc_id", "JSON"],
                              messages, strict=True):  # fmt: skip
        assert field in message, (field, message)
    _assert_counted(sidecar)
    invalid = sample(
        sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="invalid"
    )
    assert invalid == 6


def test_feedback_topic_takes_every_kind_and_dead_letters_bad_values(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """Good records become events; each bad one is dead-lettered with its reason; all committed."""
    traces, feedback = (broker.create_topic(unique(name)) for name in ("traces", "feedback"))
    settings = kafka_settings(broker.bootstrap, [traces], feedback=feedback)
    sidecar = start_sidecar(collectors={"kafka": settings})
    values = [*map(orjson.dumps, GOOD + BAD), NAN_DWELL]
    broker.produce(feedback, values)

    registry = sidecar.registry
    wait_until(
        lambda: sample(registry, "rag_monitor_records_total", collector="kafka", outcome="dead_lettered") == 6
        and sample(registry, "rag_monitor_records_total", collector="kafka", outcome="ok") == 3
    )  # fmt: skip
    _assert_counted(sidecar)
    dead = sorted(
        broker.read(settings["dead_letter_topic"]),
        key=lambda r: int(_header(r, SOURCE_OFFSET_HEADER)),
    )
    assert [int(_header(r, SOURCE_OFFSET_HEADER)) for r in dead] == list(range(3, 9))
    assert [r.value for r in dead] == values[3:]
    reasons = [_header(r, REASON_HEADER) for r in dead]
    for field, reason in zip(["kind", "doc_id", "dwell_seconds", "reason", "1.doc_id", "JSON"],
                             reasons, strict=True):  # fmt: skip
        assert field in reason, (field, reason)
    wait_until(lambda: broker.committed(settings["group_id"]) == {TopicPartition(feedback, 0): 9})


def _header(record: Any, name: str) -> str:
    return dict(record.headers)[name].decode()
