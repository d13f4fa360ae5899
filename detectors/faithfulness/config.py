"""The detectors.faithfulness section."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator

from detectors.faithfulness.hhem import HHEM_REPO
from monitor.section import Patterns, Section

AlwaysSample = Literal["thumbs_down", "probe"]


class FaithfulnessConfig(Section):
    enabled: bool = Field(True, description="score a sample of answers with HHEM")
    model: str = Field(
        HHEM_REPO,
        description="hub id (read from the local cache; `rag-monitor models fetch` fills it) "
        "or a directory",
    )
    sample_rate: float = Field(0.02, gt=0, le=1, description="share of traces scored")
    always_sample: list[AlwaysSample] = Field(
        default_factory=lambda: list(get_args(AlwaysSample)), description="kinds always scored"
    )
    max_per_second: float = Field(5.0, gt=0, description="cap on scored traces per second")
    threshold: float = Field(0.5, ge=0, le=1, description="score at or above: consistent")
    granularity: Literal["answer", "sentence"] = Field("answer", description="unit scored")
    batch_size: int | None = Field(
        None, gt=0, description="pairs per model call (null: 1 on cpu, 8 on cuda)"
    )
    device: str = Field("cpu", description="torch device: cpu or cuda")
    precision: Literal["fp32", "bf16", "int8"] = Field(
        "fp32", description="weights: fp32, bf16, or int8 (dynamic int8 Linear layers, cpu only)"
    )
    threads: int | None = Field(
        None, gt=0, description="torch intra-op threads (null: torch's default)"
    )
    max_premise_tokens: int = Field(
        2048, gt=0, description="premise token budget; longer premises are cut and counted"
    )
    refusal_patterns: Patterns = Field(
        default_factory=lambda: [
            r"i (?:do not|don't|cannot|can't|am unable to|am not able to) "
            r"(?:know|answer|find|help)",
            r"i'm (?:not sure|unable to|not able to)",
            r"(?:sorry|unfortunately),? (?:but )?i (?:do not|don't|cannot|can't)",
            r"(?:there is|i have) (?:no|not enough) (?:information|context|data)",
            r"the (?:provided |given )?(?:context|documents?|sources?) (?:does|do) not "
            r"(?:contain|mention|say)",
        ],
        description="regexes (case-insensitive, matched at the answer's start) of refusals",
    )
    cache_size: int = Field(
        10_000, ge=0, description="scores kept in an LRU cache by (premise, answer); 0: off"
    )

    @field_validator("precision")
    @classmethod
    def _int8_on_cpu(cls, precision: str, info: Any) -> str:
        if precision == "int8" and not str(info.data.get("device", "cpu")).startswith("cpu"):
            raise ValueError("int8 runs on cpu only; use bf16 or fp32 on cuda")
        return precision
