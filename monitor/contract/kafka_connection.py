"""The Kafka connection every Kafka client of the sidecar shares: the brokers, the
security settings and the consumer tuning. It is read from ``collectors.kafka``, whose
model (``collectors/kafka/config.py``) extends it with the collector's own settings.

kafka-python takes one flat bag of settings. The configuration splits it in
two so that each setting has one place: ``security`` (protocol, SASL, SSL),
which producers need as well, and ``consumer`` (timeouts, fetch sizes, ...),
which only consumers get. Settings the sidecar decides itself are refused in
both. The names are kafka-python's (``KafkaConsumer.DEFAULT_CONFIG``; a unit
test checks the three sets cover it exactly), written out here so that
validating a file needs no kafka import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, field_validator

from monitor.contract.section import Section

SECURITY_SETTINGS = frozenset(
    {
        "security_protocol",
        *("sasl_mechanism", "sasl_plain_username", "sasl_plain_password"),
        *("sasl_kerberos_name", "sasl_kerberos_service_name", "sasl_kerberos_domain_name"),
        "sasl_oauth_token_provider",
        *("ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile"),
        *("ssl_crlfile", "ssl_password", "ssl_ciphers"),
    }
)
CONSUMER_SETTINGS = frozenset(
    {
        *("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"),
        *("max_poll_records", "fetch_min_bytes", "fetch_max_bytes", "fetch_max_wait_ms"),
        *("max_partition_fetch_bytes", "receive_message_max_bytes", "check_crcs"),
        *("request_timeout_ms", "retry_backoff_ms", "reconnect_backoff_ms"),
        *("reconnect_backoff_max_ms", "bootstrap_timeout_ms", "connections_max_idle_ms"),
        *("metadata_max_age_ms", "max_in_flight_requests_per_connection", "api_version"),
        *("client_id", "client_rack", "client_dns_lookup"),
        *("partition_assignment_strategy", "isolation_level", "exclude_internal_topics"),
        *("allow_auto_create_topics", "enable_incremental_fetch_sessions", "proxy_url"),
        *("socks5_proxy", "socket_options", "receive_buffer_bytes", "send_buffer_bytes"),
        *("selector", "metrics_enabled", "metric_reporters", "metrics_num_samples"),
        *("metrics_sample_window_ms", "metric_group_prefix"),
    }
)
# Set by the sidecar's clients; a value here would break what the docs promise.
OWNED_SETTINGS = {
    "bootstrap_servers": "set it as collectors.kafka.bootstrap_servers",
    "group_id": "set it as collectors.kafka.group_id",
    "group_instance_id": "set it as collectors.kafka.group_instance_id",
    "enable_auto_commit": "rag-monitor commits offsets itself, after processing",
    "auto_commit_interval_ms": "rag-monitor commits offsets itself, after processing",
    "default_offset_commit_callback": "rag-monitor commits offsets itself, after processing",
    "auto_offset_reset": "rag-monitor starts a new group at the earliest offset",
    "key_deserializer": "rag-monitor decodes the records itself",
    "value_deserializer": "rag-monitor decodes the records itself",
    "kafka_client": "rag-monitor supplies its own network client",
    "consumer_timeout_ms": "it has no effect: rag-monitor polls instead of iterating",
}


def _refusals(names: Iterable[str], section: str) -> list[str]:
    """Why each of ``names`` cannot go under ``collectors.kafka.<section>``."""
    accepted, other = (
        (SECURITY_SETTINGS, "consumer")
        if section == "security"
        else (CONSUMER_SETTINGS, "security")
    )
    problems = []
    for name in sorted(names):
        if name in accepted:
            continue
        if name in OWNED_SETTINGS:
            problems.append(f"{name} is not accepted: {OWNED_SETTINGS[name]}")
        elif name in SECURITY_SETTINGS | CONSUMER_SETTINGS:
            problems.append(f"{name} is a {other} setting: move it under collectors.kafka.{other}")
        else:
            problems.append(f"{name} is not a kafka-python {section} setting")
    return problems


class KafkaConnection(Section):
    """What every Kafka client of the sidecar shares: the brokers, the security settings
    and the consumer tuning. The Kafka collector's section (``collectors.kafka``) extends
    it; the review, shadow and remote-judging topics use the same connection."""

    bootstrap_servers: str | list[str] | None = Field(
        None, description="broker list; Kafka is off until this is set"
    )
    security: dict[str, Any] = Field(
        default_factory=dict,
        description="kafka-python security settings (security_protocol, sasl_*, ssl_*), "
        "given to every Kafka client of the sidecar (consumers and producers)",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="kafka-python consumer tuning of every consumer (session_timeout_ms, ...); "
        "rag-monitor's own unless set: max_poll_records 500, bootstrap_timeout_ms 5000, "
        "reconnect_backoff_max_ms 5000",
    )

    @field_validator("security", "consumer")
    @classmethod
    def _known_settings(cls, settings: dict[str, Any], info: Any) -> dict[str, Any]:
        problems = _refusals(settings, info.field_name)
        if problems:
            raise ValueError("; ".join(problems))
        return settings
