"""The detectors.drift section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from monitor.contract.section import Section


class DriftConfig(Section):
    enabled: bool = Field(True, description="test query embeddings for drift")
    backend: Literal["scipy", "alibi"] = Field(
        "scipy",
        description="MMD implementation: scipy (Apache-2.0, ours) or alibi (alibi-detect 0.12+ "
        "is under the Business Source License 1.1: no production use without a Seldon licence)",
    )
    embedder: str | None = Field(None, description="null: use traced query vectors only")
    reference_size: int = Field(1000, gt=1, description="vectors in the reference window")
    max_representations: int = Field(
        4,
        ge=1,
        le=32,
        description="representations (query embedding models) tracked at once, each with "
        "its own reference and window; the least recently seen beyond this is dropped",
    )
    window_size: int = Field(500, gt=1, description="vectors in each tested window")
    test_every_records: int = Field(250, gt=0, description="new vectors between tests")
    p_value: float = Field(0.05, gt=0, lt=1, description="significance level")
    n_permutations: int = Field(100, gt=0, description="permutations per test")
    keep_examples: bool = Field(
        False, description="keep a bounded sample of query texts per window for the report"
    )
    online: bool = Field(
        False, description="alibi only: MMDDriftOnline on every vector instead of window tests"
    )
    ert: float = Field(
        1000.0, gt=1, description="online: expected vectors between false alarms (ERT)"
    )
    n_bootstraps: int = Field(
        1000, gt=0, description="online: bootstrap samples that calibrate the thresholds"
    )

    @field_validator("online")
    @classmethod
    def _online_needs_alibi(cls, online: bool, info: Any) -> bool:
        settings = info.data
        if online and settings.get("backend") != "alibi":
            raise ValueError("online: true needs backend: alibi (MMDDriftOnline)")
        if online and settings.get("reference_size", 0) < 2 * settings.get("window_size", 0):
            raise ValueError("online: true needs reference_size >= 2 * window_size")
        return online
