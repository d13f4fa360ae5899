"""Metric and recording-rule names of the latency detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

STAGE_LATENCY_SECONDS = "rag_stage_latency_seconds"  # histogram, labels stage, variant
STAGE_LATENCY_WINDOW_SECONDS = "rag_stage_latency_window_seconds"  # gauge, stage and quantile


def stage_p95(window: str) -> str:
    """The recorded fleet-wide p95 per job and stage over ``window``."""
    return f"rag:stage_latency_seconds:p95_{window}"


def slow_ratio(window: str) -> str:
    """The recorded share of requests slower than the stage's SLO threshold (per job, stage)."""
    return f"rag:stage_latency_seconds:slow_ratio_rate{window}"


def request_count(window: str) -> str:
    """The recorded number of requests per job and stage: the evidence of the bound."""
    return f"rag:stage_latency_seconds:count_increase{window}"


def slow_lower_bound(window: str) -> str:
    """The recorded one-sided Wilson lower bound of ``slow_ratio(window)``."""
    return f"rag:stage_latency_seconds:slow_ratio_lower_bound{window}"
