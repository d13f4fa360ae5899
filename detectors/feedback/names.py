"""Metric and recording-rule names of the feedback detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

FEEDBACK_EVENTS_TOTAL = "rag_feedback_events_total"  # label kind (regenerate, thumbs, ...)
FEEDBACK_THUMBS_DOWN_TOTAL = "rag_feedback_thumbs_down_total"  # label reason (bounded set)
FEEDBACK_DWELL_SECONDS = "rag_feedback_dwell_seconds"  # histogram of dwell events

_REGENERATION = "rag:regenerations_per_request"


def regeneration_ratio(window: str) -> str:
    """Regenerate events per request per job over ``window``."""
    return f"{_REGENERATION}:ratio_rate{window}"


def regeneration_mean(window: str, baseline: str) -> str:
    """The mean of ``regeneration_ratio(window)`` over ``baseline``: the band's centre."""
    return f"{_REGENERATION}:avg{baseline}_ratio_rate{window}"


def regeneration_stddev(window: str, baseline: str) -> str:
    """The standard deviation of ``regeneration_ratio(window)`` over ``baseline``."""
    return f"{_REGENERATION}:stddev{baseline}_ratio_rate{window}"
