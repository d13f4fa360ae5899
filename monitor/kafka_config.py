"""``collectors.kafka``: the Kafka collector's configuration.

kafka-python takes one flat bag of settings. The configuration splits it in
two so that each setting has one place: ``security`` (protocol, SASL, SSL),
which the dead-letter producer needs as well, and ``consumer`` (timeouts, fetch
sizes, ...), which only the consumer gets. Settings the collector decides
itself are refused in both. The names are kafka-python's
(``KafkaConsumer.DEFAULT_CONFIG``; a unit test checks the three sets cover it
exactly), written out here so that validating a file needs no kafka import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
# Set by the collector; a value here would break what the README promises.
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


class _KafkaSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaTopics(_KafkaSection):
    traces: list[str] = Field(
        default_factory=lambda: ["otlp_spans"], description="topics carrying traces"
    )
    labels: str | None = Field("rag-labels", description="topic of gold-document labels")
    feedback: str | None = Field("rag-feedback", description="topic of user feedback events")


PayloadFormat = Literal["auto", "otlp_proto", "otlp_json", "rag_trace_json"]
# What kafka-python (and the Kafka protocol) accept as a group.instance.id.
GROUP_INSTANCE_ID = r"^[A-Za-z0-9._-]{1,249}$"


class KafkaConfig(_KafkaSection):
    bootstrap_servers: str | list[str] | None = Field(
        None, description="broker list; Kafka is off until this is set"
    )
    group_id: str = Field("rag-monitor", description="consumer group")
    topics: KafkaTopics = Field(default_factory=KafkaTopics, description="topics to consume")
    format: PayloadFormat = Field("auto", description="payload format of the trace topics")
    dead_letter_topic: str | None = Field(
        "rag-monitor-dlq", description="where undecodable records go (null: only count them)"
    )
    group_instance_id: str | None = Field(
        None,
        pattern=GROUP_INSTANCE_ID,
        description="static group membership (Kafka >= 2.3): a restarted replica with the same "
        "id gets its partitions back without a rebalance; unset: the POD_NAME environment "
        "variable when set, else dynamic membership",
    )
    static_membership: bool = Field(
        True,
        description="join with group_instance_id (or POD_NAME); false: always dynamic "
        "membership, for brokers whose static membership is broken (Tansu 0.6: docs, Kafka)",
    )
    commit_interval_s: float = Field(
        1.0, gt=0, description="commit the processed offsets at least this often"
    )
    commit_every_records: int = Field(
        500,
        gt=0,
        description="and as soon as this many records were processed: a crash replays about "
        "this many (docs, Kafka)",
    )
    ready_grace_s: float = Field(
        15.0,
        gt=0,
        description="/readyz answers 503 once the consumer has had no broker connection or no "
        "stable group membership for this long",
    )
    dead_letter_tries: int = Field(
        3,
        ge=1,
        description="attempts to write a dead letter, whole and then as a reference, before "
        "the record is skipped (counted as skipped)",
    )
    security: dict[str, Any] = Field(
        default_factory=dict,
        description="kafka-python security settings (security_protocol, sasl_*, ssl_*), "
        "given to the consumer and the dead-letter producer",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="kafka-python consumer tuning (session_timeout_ms, fetch_max_bytes, ...); "
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
