"""The detectors.shadow section: pairing production requests with their shadow twins."""

from __future__ import annotations

from pydantic import Field, model_validator

from monitor.contract.section import Section


class ShadowConfig(Section):
    enabled: bool = Field(
        False,
        description="pair traces that carry rag.pair_id (a production request and its shadow "
        "twin) and export their paired deltas; off by default because it keeps a pair store in "
        "state_dir and, with Kafka, needs the two topics below",
    )
    pair_ttl_s: float = Field(
        300.0,
        gt=0,
        description="how long a half waits for its twin; after that it counts as timed_out",
    )
    settle_s: float = Field(
        120.0,
        ge=0,
        description="how long a joined pair waits for late signals (a judge's faithfulness "
        "score, a false-exclusion decision) before its deltas are recorded",
    )
    max_pending: int = Field(
        50_000,
        gt=0,
        description="halves and joined pairs held at once; the oldest beyond it count as evicted",
    )
    retention_days: float = Field(
        30, gt=0, description="pairs are deleted from the pair store this many days after joining"
    )
    halves_topic: str = Field(
        "rag-shadow-halves",
        min_length=1,
        description="Kafka topic (keyed by pair id) that brings both halves of a pair to one "
        "replica when collectors.kafka.bootstrap_servers is set; read in a consumer group",
    )
    pairs_topic: str = Field(
        "rag-shadow-pairs",
        min_length=1,
        description="Kafka topic of joined pairs and unmatched halves; every replica reads it "
        "whole into its pair store, so `report shadow` on any replica is complete",
    )
    group_id: str = Field(
        "rag-monitor-shadow",
        min_length=1,
        description="consumer group of the replicas reading halves_topic",
    )

    @model_validator(mode="after")
    def _two_topics(self) -> ShadowConfig:
        if self.halves_topic == self.pairs_topic:
            raise ValueError("halves_topic and pairs_topic must be two different topics")
        return self
