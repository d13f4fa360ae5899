"""What the LLM judge itself costs: requests by outcome, tokens, USD, and claims.

Prices (``prices.py``) are the configured ones (``llm_judge.input_usd_per_1m_tokens`` and
``output_usd_per_1m_tokens``), else the genai-prices table's entry for the model; a
model in neither (a self-hosted one) has its tokens counted but no cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import Counter, Gauge

from detectors.faithfulness.names import (
    JUDGE_CLAIMS_CUT_TOTAL,
    JUDGE_CLAIMS_TOTAL,
    JUDGE_COST_USD_TOTAL,
    JUDGE_REQUESTS_TOTAL,
    JUDGE_TOKENS_TOTAL,
)
from detectors.faithfulness.openai_chat import REQUEST_OUTCOMES, RequestOutcome
from detectors.faithfulness.prices import Prices, Usage

if TYPE_CHECKING:
    from monitor.contract.sidecar_registry import SidecarRegistry

_M = TypeVar("_M", Counter, Gauge)


class JudgeMetrics:
    """``rag_judge_*`` series of one judge (label ``judge``)."""

    def __init__(
        self,
        registry: SidecarRegistry | None,
        judge: str,
        prices: Prices | None,
        on_cost: Callable[[float], None] | None = None,
    ) -> None:
        """``on_cost`` hears each amount the cost counter adds, as it adds it (a cascade's
        budget charges exactly what ``rag_judge_cost_usd_total`` counts)."""
        self._prices = prices
        self._on_cost = on_cost
        requests = judge_metric(
            registry,
            Counter,
            JUDGE_REQUESTS_TOTAL,
            "Requests the LLM judge made, each attempt once, by outcome (ok; malformed: a "
            "reply off its schema; timeout, rate_limited, server_error, client_error, "
            "connection_error).",
            ["judge", "outcome"],
        )
        self._requests = {o: requests.labels(judge, o) for o in REQUEST_OUTCOMES}
        tokens = judge_metric(
            registry,
            Counter,
            JUDGE_TOKENS_TOTAL,
            "Tokens the LLM judge's replies report, by direction (input, output).",
            ["judge", "direction"],
        )
        self._input, self._output = tokens.labels(judge, "input"), tokens.labels(judge, "output")
        self._cost = (
            judge_metric(
                registry,
                Counter,
                JUDGE_COST_USD_TOTAL,
                "USD the LLM judge's tokens cost (configured prices, else genai-prices; absent "
                "for an unpriced model).",
                ["judge"],
            ).labels(judge)
            if prices is not None
            else None
        )
        claims = judge_metric(
            registry,
            Counter,
            JUDGE_CLAIMS_TOTAL,
            "Claims the LLM judge verified, by verdict (supported, unsupported).",
            ["judge", "verdict"],
        )
        self._supported = claims.labels(judge, "supported")
        self._unsupported = claims.labels(judge, "unsupported")
        self._cut = judge_metric(
            registry,
            Counter,
            JUDGE_CLAIMS_CUT_TOTAL,
            "Claims past llm_judge.max_claims, cut before verification.",
            ["judge"],
        ).labels(judge)

    def attempt(self, outcome: RequestOutcome, usage: Usage | None) -> None:
        """One request's outcome and the tokens its reply reports (spent even when the
        reply is then refused)."""
        self._requests[outcome].inc()
        if usage is None:
            return
        self._input.inc(usage.input_tokens)
        self._output.inc(usage.output_tokens)
        if self._cost is not None and self._prices is not None:
            cost = self._prices.cost(usage)
            self._cost.inc(cost)
            if self._on_cost is not None:
                self._on_cost(cost)

    def claims(self, supported: int, unsupported: int) -> None:
        self._supported.inc(supported)
        self._unsupported.inc(unsupported)

    def claims_cut(self, count: int) -> None:
        self._cut.inc(count)


def judge_metric(
    registry: SidecarRegistry | None,
    kind: type[_M],
    name: str,
    documentation: str,
    labels: list[str],
) -> _M:
    """A judge's metric family: shared on ``registry`` (several judges, a cascade's tiers,
    declare the same family), or unregistered without one (a judge used on its own)."""
    if registry is None:
        return kind(name, documentation, labels, registry=None)
    return registry.family(kind, name, documentation, labels)
