"""collectors.kafka: security and consumer settings, each in its own mapping, checked at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer

from collectors.kafka.dead_letter import producer_settings
from collectors.kafka.group import consumer_settings, group_instance_id
from monitor.contract.kafka_connection import CONSUMER_SETTINGS, OWNED_SETTINGS, SECURITY_SETTINGS
from monitor.runtime.config_loading import ConfigError, load_config

SASL = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "PLAIN",
    "sasl_plain_username": "rag-monitor",
    "sasl_plain_password": "s3cret",
}


def test_the_three_name_sets_cover_kafka_python_exactly() -> None:
    """Security, consumer and owned names are disjoint and together are KafkaConsumer's settings."""
    owned = set(OWNED_SETTINGS)
    assert not SECURITY_SETTINGS & CONSUMER_SETTINGS
    assert not (SECURITY_SETTINGS | CONSUMER_SETTINGS) & owned
    assert SECURITY_SETTINGS | CONSUMER_SETTINGS | owned == set(KafkaConsumer.DEFAULT_CONFIG)
    assert set(KafkaProducer.DEFAULT_CONFIG) >= SECURITY_SETTINGS


def load_kafka(tmp_path: Path, kafka: dict[str, Any]) -> Any:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"collectors": {"kafka": kafka}}))
    return load_config(path, environ={})


@pytest.mark.parametrize(
    ("kafka", "problem"),
    [
        (
            {"security": {"session_timeout_ms": 6000}},
            "collectors.kafka.security: Value error, session_timeout_ms is a consumer setting: "
            "move it under collectors.kafka.consumer",
        ),
        (
            {"consumer": {"ssl_cafile": "/ca.pem"}},
            "collectors.kafka.consumer: Value error, ssl_cafile is a security setting: "
            "move it under collectors.kafka.security",
        ),
        (
            {"consumer": {"sesion_timeout_ms": 6000}},
            "collectors.kafka.consumer: Value error, sesion_timeout_ms is not a kafka-python "
            "consumer setting",
        ),
        (
            {"security": {"sasl_pasword": "x"}},
            "collectors.kafka.security: Value error, sasl_pasword is not a kafka-python security "
            "setting",
        ),
        (
            {"consumer": {"group_id": "other"}},
            "collectors.kafka.consumer: Value error, group_id is not accepted: set it as "
            "collectors.kafka.group_id",
        ),
        (
            {"consumer": {"group_instance_id": "pod-a"}},
            "collectors.kafka.consumer: Value error, group_instance_id is not accepted: set it "
            "as collectors.kafka.group_instance_id",
        ),
        (
            {"group_instance_id": "pod a/1"},
            "collectors.kafka.group_instance_id: String should match pattern "
            "'^[A-Za-z0-9._-]{1,249}$' (got 'pod a/1')",
        ),
        (
            {"consumer": {"enable_auto_commit": True}},
            "collectors.kafka.consumer: Value error, enable_auto_commit is not accepted: "
            "rag-monitor commits offsets itself, after processing",
        ),
        (
            {"topics": {"traces": ["otlp_spans"], "logs": "otlp_spans"}},
            "collectors.kafka.topics: Value error, each topic carries one kind of record; "
            "named more than once: otlp_spans",
        ),
        (
            {"security": {**SASL, "heartbeat_interval_ms": 1000, "max_poll_records": 10}},
            "collectors.kafka.security: Value error, heartbeat_interval_ms is a consumer setting: "
            "move it under collectors.kafka.consumer; max_poll_records is a consumer setting: "
            "move it under collectors.kafka.consumer",
        ),
    ],
    ids=[
        "tuning-under-security", "security-under-consumer", "unknown-consumer",
        "unknown-security", "owned-group", "owned-instance-id", "bad-instance-id",
        "owned-commit", "logs-topic-is-a-traces-topic", "several-no-password-echoed",
    ],
)  # fmt: skip
def test_misplaced_or_unknown_settings_are_refused_naming_the_key(
    tmp_path: Path, kafka: dict[str, Any], problem: str
) -> None:
    """Each wrong key is named with where it belongs; the mapping (maybe a password) is not echoed."""
    with pytest.raises(ConfigError) as caught:
        load_kafka(tmp_path, kafka)
    assert caught.value.problems == [problem]


def test_consumer_gets_both_mappings_and_the_dead_letter_producer_only_security(
    tmp_path: Path,
) -> None:
    """consumer settings reach the consumer over rag-monitor's defaults; the producer sees none."""
    config = load_kafka(
        tmp_path,
        {
            "bootstrap_servers": "broker:9092",
            "security": SASL,
            "consumer": {"session_timeout_ms": 6000, "bootstrap_timeout_ms": 300},
        },
    ).collectors.kafka
    assert consumer_settings(config, environ={}) == {
        "bootstrap_servers": "broker:9092",
        "group_id": "rag-monitor",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_records": 500,
        "reconnect_backoff_max_ms": 5000,
        "session_timeout_ms": 6000,
        "bootstrap_timeout_ms": 300,
        **SASL,
    }
    assert producer_settings(config) == {
        "bootstrap_servers": "broker:9092",
        "acks": "all",
        "bootstrap_timeout_ms": 5000,
        "max_block_ms": 5000,
        "request_timeout_ms": 10_000,
        "delivery_timeout_ms": 15_000,
        **SASL,
    }
    pod = consumer_settings(config, environ={"POD_NAME": "rag-service-7d9f-x2"})
    assert set(pod) <= set(KafkaConsumer.DEFAULT_CONFIG)
    assert set(producer_settings(config)) <= set(KafkaProducer.DEFAULT_CONFIG)


@pytest.mark.parametrize(
    ("kafka", "environ", "expected"),
    [
        ({}, {}, None),
        ({}, {"POD_NAME": "rag-service-7d9f-x2"}, "rag-service-7d9f-x2"),
        ({}, {"POD_NAME": "  "}, None),
        ({"group_instance_id": "replica-1"}, {"POD_NAME": "rag-service-7d9f-x2"}, "replica-1"),
        ({"static_membership": False}, {"POD_NAME": "rag-service-7d9f-x2"}, None),
        ({"static_membership": False, "group_instance_id": "replica-1"}, {}, None),
    ],
    ids=["dynamic", "pod-name", "blank-pod-name", "configured-wins", "off", "off-beats-id"],
)
def test_static_member_id_comes_from_config_then_pod_name(
    tmp_path: Path, kafka: dict[str, Any], environ: dict[str, str], expected: str | None
) -> None:
    """group_instance_id, else POD_NAME, else a dynamic member; static_membership: false wins."""
    config = load_kafka(tmp_path, {"bootstrap_servers": "broker:9092", **kafka}).collectors.kafka
    assert group_instance_id(config, environ) == expected
    settings = consumer_settings(config, environ)
    assert settings.get("group_instance_id") == expected


def test_a_pod_name_kafka_refuses_fails_at_start_naming_the_fix(tmp_path: Path) -> None:
    """A POD_NAME that is no valid group.instance.id is refused before the consumer starts."""
    config = load_kafka(tmp_path, {"bootstrap_servers": "broker:9092"}).collectors.kafka
    with pytest.raises(ValueError, match="static_membership: false"):
        consumer_settings(config, environ={"POD_NAME": "pod/with/slashes"})
