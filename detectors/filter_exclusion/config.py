"""The detectors.filter_exclusion section."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from monitor.contract.section import Section


class FilterExclusionConfig(Section):
    golden_set: Path | None = Field(None, description="JSON lines of probe_id and gold_doc_ids")
    recall_k: list[int] = Field(default_factory=lambda: [5, 10], description="k of recall@k")
    join_ttl_s: float = Field(3600, gt=0, description="how long labels and traces wait to join")
    max_pending: int = Field(
        50_000, gt=0, description="labels and traces each held for a join; the oldest go first"
    )

    @field_validator("recall_k")
    @classmethod
    def _distinct_positive(cls, recall_k: list[int]) -> list[int]:
        if not recall_k or any(k < 1 for k in recall_k):
            raise ValueError("every k must be a positive integer, and at least one is needed")
        if len(set(recall_k)) != len(recall_k):
            raise ValueError("duplicate k: each k may appear once")
        return sorted(recall_k)
