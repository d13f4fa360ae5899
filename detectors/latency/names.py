"""Metric and recording-rule names of the latency detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

STAGE_LATENCY_SECONDS = "rag_stage_latency_seconds"  # histogram, label stage
STAGE_LATENCY_WINDOW_SECONDS = "rag_stage_latency_window_seconds"  # gauge, stage and quantile


def stage_p95(window: str) -> str:
    """The recorded fleet-wide p95 per job and stage over ``window``."""
    return f"rag:stage_latency_seconds:p95_{window}"
