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
    min_scored_per_hour: float = Field(
        600,
        ge=0,
        description="floor of traces scored an hour per replica: at low traffic the sample "
        "rate rises to reach it (within max_per_second), so the alert's bound has evidence; "
        "0: off",
    )
    threshold: float = Field(0.5, ge=0, le=1, description="score at or above: consistent")
    granularity: Literal["answer", "sentence"] = Field("answer", description="unit scored")
    batch_size: int | None = Field(
        None, gt=0, description="pairs per model call (null: 1 on cpu, 8 on cuda)"
    )
    device: str = Field("cpu", description="torch device: cpu or cuda")
    precision: Literal["auto", "fp32", "bf16_autocast", "bf16", "int8", "onnx"] = Field(
        "auto",
        description="auto (measure each at start-up, keep the fastest within "
        "precision_tolerance of fp32), fp32, bf16_autocast (bf16 matrix products, fp32 layer "
        "norms and classifier), bf16 (all weights), int8 (dynamic int8 Linear layers, cpu) or "
        "onnx (ONNX Runtime, fp32, cpu)",
    )
    precision_tolerance: float = Field(
        0.01,
        ge=0,
        le=1,
        description="auto: the largest score change from fp32 allowed on the calibration set",
    )
    threads: int | None = Field(
        None,
        gt=0,
        description="torch intra-op threads (null: the cores the sidecar may use, its CPU "
        "affinity capped by its cgroup CPU quota)",
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
        on_cpu = str(info.data.get("device", "cpu")).startswith("cpu")
        if precision in ("int8", "onnx") and not on_cpu:
            raise ValueError(f"{precision} runs on cpu only; use auto, bf16 or fp32 on cuda")
        return precision
