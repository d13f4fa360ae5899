"""Metric and recording-rule names of the faithfulness detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

# Every verdict series has the label judge: the judge's identity (judge_identity.judge_identity).
FAITHFULNESS_SCORE = "rag_faithfulness_score"  # histogram of the judge's scores, label variant
EVALUATIONS_TOTAL = "rag_faithfulness_evaluations_total"  # labels outcome (scored, ...), variant
BELOW_THRESHOLD_TOTAL = "rag_faithfulness_below_threshold_total"  # label variant
SCORED = f'{EVALUATIONS_TOTAL}{{outcome="scored"}}'

# The LLM judge's own work and spend, label judge (and outcome, direction, verdict).
JUDGE_REQUESTS_TOTAL = "rag_judge_requests_total"  # label outcome: ok, timeout, malformed, ...
JUDGE_TOKENS_TOTAL = "rag_judge_tokens_total"  # label direction: input, output
JUDGE_COST_USD_TOTAL = "rag_judge_cost_usd_total"
JUDGE_CLAIMS_TOTAL = "rag_judge_claims_total"  # label verdict: supported, unsupported
JUDGE_CLAIMS_CUT_TOTAL = "rag_judge_claims_cut_total"  # claims past max_claims, not verified
# A cascade (judge: cascade): each tier's verdicts, label judge (the tier's identity), tier
# (first, second), verdict (supported, unsupported, no_claims, error); and the uncertain
# answers by what became of them, label judge (the second tier's), outcome (sent,
# refused_budget, refused_rate).
JUDGE_TIER_VERDICTS_TOTAL = "rag_judge_tier_verdicts_total"
JUDGE_ESCALATIONS_TOTAL = "rag_judge_escalations_total"
JUDGE_BUDGET_USD = "rag_judge_budget_usd"  # label judge, state (spent, reserved, limit)
TRUNCATED_TOTAL = "rag_faithfulness_truncated_total"
CACHE_HITS_TOTAL = "rag_faithfulness_cache_hits_total"
MODEL_PAIRS_TOTAL = "rag_faithfulness_model_pairs_total"
MODEL_SECONDS_TOTAL = "rag_faithfulness_model_seconds_total"
PRECISION_INFO = "rag_faithfulness_precision_info"
SCORES_PUBLISHED_TOTAL = "rag_judge_scores_published_total"
SCORER_PARTITIONS = "rag_judge_scorer_partitions"
PUBLISHED_TOTAL = "rag_judge_published_total"
RESULTS_READ_TOTAL = "rag_judge_results_read_total"
SCORER_PAIRS_TOTAL = "rag_judge_scorer_pairs_total"


def pass_ratio(window: str) -> str:
    """The recorded share of scored answers at or above the threshold per job."""
    return f"rag:faithfulness_pass:ratio_rate{window}"


def scored_count(window: str) -> str:
    """The recorded number of scored answers per job: the evidence the bound rests on."""
    return f"rag:faithfulness_scored:increase{window}"


def pass_upper_bound(window: str) -> str:
    """The recorded one-sided Wilson upper bound of ``pass_ratio(window)``."""
    return f"rag:faithfulness_pass:upper_bound{window}"
