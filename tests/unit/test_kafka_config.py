"""collectors.kafka: security and consumer settings, each in its own mapping, checked at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer

from collectors.kafka import consumer_settings, producer_settings
from monitor.config import ConfigError, load_config
from monitor.kafka_config import CONSUMER_SETTINGS, OWNED_SETTINGS, SECURITY_SETTINGS

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
            {"consumer": {"enable_auto_commit": True}},
            "collectors.kafka.consumer: Value error, enable_auto_commit is not accepted: "
            "rag-monitor commits offsets itself, after processing",
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
        "unknown-security", "owned-group", "owned-commit", "several-no-password-echoed",
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
    assert consumer_settings(config) == {
        "bootstrap_servers": "broker:9092",
        "group_id": "rag-monitor",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_records": 500,
        "session_timeout_ms": 6000,
        "bootstrap_timeout_ms": 300,
        **SASL,
    }
    assert producer_settings(config) == {"bootstrap_servers": "broker:9092", "acks": "all", **SASL}
    assert set(consumer_settings(config)) <= set(KafkaConsumer.DEFAULT_CONFIG)
    assert set(producer_settings(config)) <= set(KafkaProducer.DEFAULT_CONFIG)
