"""Metric and recording-rule names of the cost detector: the one spelling its metrics,
its rules and its panels share."""

from __future__ import annotations

# The cost histogram is spelled by the core (monitor/contract/names.py): the guardrail report
# reads its count too.
from monitor.contract import names as core

REQUEST_COST_USD = core.REQUEST_COST_USD

COST_USD_TOTAL = "rag_cost_usd_total"  # spend by model and variant
COST_REQUESTS_TOTAL = "rag_cost_requests_total"  # requests by pricing outcome and variant
COST_UNPRICED_REQUESTS_TOTAL = "rag_cost_unpriced_requests_total"  # by reason


def cost_per_query(window: str) -> str:
    """The recorded mean cost per request per job over ``window``."""
    return f"rag:request_cost_usd:mean{window}"
