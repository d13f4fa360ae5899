"""Metric and recording-rule names of the feedback detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

FEEDBACK_EVENTS_TOTAL = "rag_feedback_events_total"  # labels kind (regenerate, ...), variant
FEEDBACK_THUMBS_DOWN_TOTAL = "rag_feedback_thumbs_down_total"  # labels reason, variant
FEEDBACK_DWELL_SECONDS = "rag_feedback_dwell_seconds"  # histogram of dwell events

# The prefix of the regeneration control band's recording rules
# (monitor.contract.rulekit.control_band).
REGENERATION = "rag:regenerations_per_request"
