"""``detectors.evaluations``: evaluators' verdicts (OpenTelemetry ``gen_ai.evaluation.result``,
OpenInference annotations) as guardrails.

Each configured evaluation says how a result passes (a score at or above ``score_min``,
at or below ``score_max``, or a label among ``labels``), and the share of passing results
it must keep. The configured names are the allow-list of the ``evaluation`` label: any
other name is counted as ``other`` and never alerted on, so a producer sending thousands
of names cannot grow the series.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from monitor.contract.section import Section
from monitor.contract.trace import EvaluationResult
from monitor.contract.variants import allow_list
from monitor.contract.verdict_exports.config import EmitConfig

MAX_EVALUATIONS = 64  # each multiplies the evaluation series by outcomes and variants


class EvaluationRule(Section):
    """How one evaluation's results pass, and its guardrail."""

    score_min: float | None = Field(
        None, description="A result passes when its score is at or above this (e.g. 0.7)."
    )
    score_max: float | None = Field(
        None, description="A result passes when its score is at or below this (a toxicity, say)."
    )
    labels: list[str] | None = Field(
        None, min_length=1, description="A result passes when its label is one of these."
    )
    min_pass_share: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="The guardrail: the share of judged results that must pass (None: the "
        "section's min_pass_share).",
    )
    severity: Literal["page", "ticket"] | None = Field(
        None, description="The alert's severity (None: the section's severity)."
    )
    sample_rate: float = Field(
        1.0,
        gt=0,
        le=1,
        description="The share of requests the producer evaluates (1: every request). The "
        "bound rests on the evaluated count, so a sample's is as wide as its size makes it; "
        "the rate sets the dashboard's expected count and the backtest's simulated sample.",
    )
    compare_with_review: bool = Field(
        False,
        description="Count this evaluation's agreement with human review "
        "(rag_review_evaluation_agreement_total, rag-monitor report review): set it only "
        "for evaluations that judge what reviewers judge, whether the answer is supported "
        "by its contexts (faithfulness, groundedness); pass is compared with 'yes', fail "
        "with 'no' or 'partly'.",
    )

    def passes(self, result: EvaluationResult) -> bool | None:
        """Whether ``result`` passes this rule; None when it cannot be judged by it (the
        producer's error, or no finite score or label where the rule needs one)."""
        if result.error_type:
            return None
        if self.labels is not None:
            return None if result.label is None else result.label in self.labels
        if result.score is None or not math.isfinite(result.score):
            return None
        if self.score_min is not None:
            return result.score >= self.score_min
        assert self.score_max is not None  # exactly one pass rule (the validator)
        return result.score <= self.score_max

    @model_validator(mode="after")
    def _one_pass_rule(self) -> EvaluationRule:
        given = [self.score_min is not None, self.score_max is not None, self.labels is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of score_min, score_max or labels")
        return self


class EvaluationsConfig(Section):
    """Evaluation results as guardrails: their pass rules, shares and severities."""

    evaluations: dict[str, EvaluationRule] = Field(
        default_factory=dict,
        max_length=MAX_EVALUATIONS,
        description="Per evaluation name (gen_ai.evaluation.name): its pass rule; the names "
        "are the allow-list, others count as 'other'.",
    )
    min_pass_share: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="The guardrail of an evaluation that sets none: the share that must pass.",
    )
    severity: Literal["page", "ticket"] = Field(
        "page", description="The severity of an evaluation that sets none."
    )
    max_tracked_traces: int = Field(
        50_000,
        ge=1,
        description="Recent traces remembered to join results sent after their request "
        "(by trace id and gen_ai.response.id) to the request's variant.",
    )
    max_tracked_results: int = Field(
        100_000,
        ge=1,
        description="Recent results remembered (by trace id, span id, name, response id "
        "and verdict) so that one seen again, as a span event and a log record or in a "
        "retried export, counts once (rag_evaluation_duplicates_total); about 140 bytes each.",
    )

    emit: EmitConfig | None = Field(
        None,
        description="Send this sidecar's verdicts (faithfulness scores and unscored "
        "outcomes, labeled queries' false exclusions) as OpenTelemetry "
        "gen_ai.evaluation.result log records (None: off).",
    )

    @model_validator(mode="after")
    def _names_are_label_values(self) -> EvaluationsConfig:
        allow_list(self.evaluations)
        return self

    def rule(self, name: str) -> EvaluationRule | None:
        return self.evaluations.get(name)

    def guardrail(self, name: str) -> tuple[float, str]:
        """(min pass share, severity) of the evaluation ``name``."""
        rule = self.evaluations.get(name)
        share = rule.min_pass_share if rule and rule.min_pass_share else self.min_pass_share
        return share, (rule.severity if rule and rule.severity else self.severity)
