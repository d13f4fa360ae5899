"""The detectors.cost section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from monitor.contract.section import Section


class ModelPrice(Section):
    input_per_mtok: float = Field(0.0, ge=0, description="USD per million input tokens")
    output_per_mtok: float = Field(0.0, ge=0, description="USD per million output tokens")
    embedding_per_mtok: float = Field(0.0, ge=0, description="USD per million embedding tokens")
    rerank_per_kunit: float = Field(0.0, ge=0, description="USD per thousand rerank units")


class CostConfig(Section):
    prices: Literal["genai-prices"] = Field("genai-prices", description="price table")
    overrides: dict[str, ModelPrice] = Field(
        default_factory=dict, description="model -> prices, for private deployments"
    )
