"""The detectors.review section: the human review loop (sampler, queue, reviewer's page)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from monitor.contract.section import Patterns, Section
from monitor.contract.service_config import HttpListener

DEFAULT_FOLLOW_UP_PATTERNS = (
    r"\bare you sure\b",
    r"\bbut what about\b",
    r"\bthat'?s (not right|wrong|incorrect)\b",
    r"\bwhat do you mean\b",
)


class ReviewHttpSettings(HttpListener):
    """Where the reviewer's page (``/review``) is served, and its bounds."""

    enabled: bool = Field(True, description="serve the reviewer's page (/review)")
    port: int = Field(4320, ge=0, le=65535, description="TCP port (0 picks a free one)")
    max_connections: int = Field(
        64, gt=0, description="open connections at most; a page for a few reviewers"
    )
    handler_threads: int = Field(2, gt=0, description="requests handled at once")
    judge_spans: Literal["outside_random", "always", "never"] = Field(
        "outside_random",
        description="mark the parts of the answer the judge found unsupported (judges that "
        "find them: token_classifier): outside_random (on every item but those of the "
        "random stratum, whose verdicts measure the judge's bias and so must not see the "
        "judge's view), always, or never",
    )
    max_body_bytes: int = Field(
        65_536, gt=0, description="largest accepted form body (a verdict with its note)"
    )


class MaxPerHour(Section):
    """Per-stratum bounds: items queued an hour at most, spent evenly over the hour (five
    minutes of it saved at most); the rest are counted skipped."""

    random: int = Field(200, ge=0, description="random items per hour at most")
    low_faithfulness: int = Field(100, ge=0, description="low-faithfulness items per hour")
    thumbs_down: int = Field(100, ge=0, description="thumbs-down items per hour at most")
    follow_up: int = Field(100, ge=0, description="follow-up items per hour at most")


class ReviewConfig(Section):
    enabled: bool = Field(
        False,
        description="sample answers into the review queue; off by default because the queue "
        "stores production text (query, answer, contexts) in state_dir and on Kafka",
    )
    random_rate: float = Field(
        0.015, ge=0, le=1, description="share of traces queued at random (by trace-id hash)"
    )
    low_faithfulness_rate: float = Field(
        1.0, ge=0, le=1, description="share of traces HHEM scored under its threshold queued"
    )
    thumbs_down_rate: float = Field(
        1.0, ge=0, le=1, description="share of thumbs-down traces queued (oversampling)"
    )
    follow_up_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of traces queued whose next query in the session matches a pattern",
    )
    follow_up_patterns: Patterns = Field(
        default_factory=lambda: list(DEFAULT_FOLLOW_UP_PATTERNS),
        description="case-insensitive regular expressions: a next query matching one makes "
        "the previous answer of the session a follow_up item",
    )
    weekly_reading: int = Field(
        50,
        ge=0,
        description="random answers queued per week for reading, spread over its 168 hours",
    )
    max_per_hour: MaxPerHour = Field(
        default_factory=MaxPerHour,
        description="per-stratum bounds on items queued an hour, spent evenly over it",
    )
    buffer_size: int = Field(
        10_000,
        gt=0,
        description="recent traces held in memory so that later evidence (an HHEM score, "
        "feedback, a follow-up query) can still queue them",
    )
    retention_days: float = Field(
        30, gt=0, description="items (and their verdicts) are deleted this many days after queuing"
    )
    http: ReviewHttpSettings = Field(
        default_factory=ReviewHttpSettings,
        description="the reviewer's page: same bearer token as the write endpoints",
    )
    topic: str = Field(
        "rag-review",
        min_length=1,
        description="Kafka topic of queued items (JSON, schema rag-review/1) when "
        "collectors.kafka.bootstrap_servers is set; verdicts go to <topic>-verdicts",
    )
