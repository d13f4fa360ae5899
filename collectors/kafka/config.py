"""``collectors.kafka``: the Kafka collector's configuration.

The brokers, security settings and consumer tuning are the core's
``KafkaConnection`` (``monitor/contract/kafka_connection.py``): the review, shadow and
remote-judging topics connect with them too. What only the collector reads (its
topics, payload format, group, dead letters and commit cadence) is declared here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.section import Section


class KafkaTopics(Section):
    traces: list[str] = Field(
        default_factory=lambda: ["otlp_spans"], description="topics carrying traces"
    )
    labels: str | None = Field("rag-labels", description="topic of gold-document labels")
    feedback: str | None = Field("rag-feedback", description="topic of user feedback events")
    logs: str | None = Field(
        None,
        description="topic of OTLP log exports (ExportLogsServiceRequest, otlp_proto or "
        "otlp_json, told apart per record): gen_ai.evaluation.result records become "
        "evaluation events (null: not read)",
    )

    @model_validator(mode="after")
    def _one_kind_per_topic(self) -> KafkaTopics:
        # A record is decoded by its topic's kind: a topic named twice would be read as the
        # first kind only, and the other kind's records dead-lettered or dropped.
        named = [*self.traces, *(t for t in (self.labels, self.feedback, self.logs) if t)]
        repeated = sorted({topic for topic in named if named.count(topic) > 1})
        if repeated:
            raise ValueError("each topic carries one kind of record; named more than once: "
                             + ", ".join(repeated))  # fmt: skip
        return self


PayloadFormat = Literal["auto", "otlp_proto", "otlp_json", "rag_trace_json"]
# What kafka-python (and the Kafka protocol) accept as a group.instance.id.
GROUP_INSTANCE_ID = r"^[A-Za-z0-9._-]{1,249}$"


class KafkaConfig(KafkaConnection):
    """``collectors.kafka``: the shared connection, then the collector's topics, group and
    commit cadence."""

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
