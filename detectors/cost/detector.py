"""Cost per query: the producer's ``llm.cost.total``, else tokens x prices.

Prices come from ``cost.overrides`` (private deployments) or the
``genai-prices`` table. Each usage entry is priced on its own: priced entries
always count, so one unpriced model (a reranker, say) does not hide what the
generator cost. An unpriced entry is counted in
``rag_cost_unpriced_requests_total{reason}`` and makes the request's cost a
lower bound, counted as ``rag_cost_requests_total{pricing="partial"}``. A
request with nothing priced is not observed at all: a guessed 0 would pull the
cost-per-query guardrail down exactly when it is blind. A request without any token
usage (and no producer cost) is also counted as a missing input
(``rag_monitor_detector_missing_inputs_total{detector="cost",field="usage"}``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ClassVar

from prometheus_client import Counter, Histogram

from detectors.cost.config import CostConfig, ModelPrice
from detectors.cost.names import (
    COST_REQUESTS_TOTAL,
    COST_UNPRICED_REQUESTS_TOTAL,
    COST_USD_TOTAL,
    REQUEST_COST_USD,
)
from monitor.contract.detector import InlineDetector
from monitor.contract.missing import MissingInputs
from monitor.contract.names import SLICE_COST_REQUESTS_TOTAL, SLICE_COST_USD_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import SliceCounter, Slicer
from monitor.contract.trace import RagTrace, Usage
from monitor.contract.variants import PRODUCTION, ByVariant, variant_of

# $0.0001 to $1 per request, about three buckets per decade.
COST_BUCKETS = (
    0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
)  # fmt: skip
OTHER = "other"
_PRICE_TTL_S = 3600.0  # the table can hold dated prices; look them up again hourly
_MAX_CACHED_MODELS = 1000  # model names come from traffic: bound what we remember
_MTOK = Decimal(1_000_000)


class UnpricedError(LookupError):
    """No price for this usage; ``reason`` becomes the metric label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _TablePrice:
    """One model's entry in the genai-prices table.

    genai-prices takes about 80 us per calculation; at thousands of requests
    per second that would dominate ingest. When the entry's input and output
    prices are flat per-token rates and a probe calculation agrees, plain
    arithmetic on those rates gives the same figure; anything else (tiers,
    per-request fees, per-character prices) goes through genai-prices.
    """

    _PROBES = ((1234, 567), (98_765, 4_321))

    def __init__(self, model_id: str, price: Any) -> None:
        self.model_id = model_id
        self._price = price
        self._input = getattr(price, "input_mtok", None) or Decimal(0)
        self._output = getattr(price, "output_mtok", None) or Decimal(0)
        self._flat = self._probe_flat()

    def _probe_flat(self) -> bool:
        if not (isinstance(self._input, Decimal) and isinstance(self._output, Decimal)):
            return False
        try:
            return all(
                self._flat_cost(i, o) == self._full_cost({"input_tokens": i, "output_tokens": o})
                for i, o in self._PROBES
            )
        except (LookupError, ValueError):
            return False

    def cost(self, usage: Usage) -> float:
        input_tokens = usage.prompt_tokens + usage.embedding_tokens
        if self._flat and not usage.rerank_units:
            return float(self._flat_cost(input_tokens, usage.completion_tokens))
        counts = {"input_tokens": input_tokens, "output_tokens": usage.completion_tokens}
        if usage.rerank_units:
            counts["rerank_searches"] = usage.rerank_units
        try:
            return float(self._full_cost(counts))
        except (LookupError, ValueError) as exc:
            raise UnpricedError("unpriced_unit") from exc

    def _flat_cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        return (input_tokens * self._input + output_tokens * self._output) / _MTOK

    def _full_cost(self, counts: dict[str, int]) -> Decimal:
        from genai_prices import Usage as PriceUsage

        return Decimal(self._price.calc_price(PriceUsage(**counts))["total_price"])


class PriceBook:
    """Prices per model: overrides first, then the genai-prices table (cached per model)."""

    def __init__(
        self,
        overrides: dict[str, ModelPrice],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._overrides = overrides
        self._clock = clock
        self._table: dict[tuple[str, str | None], tuple[float, _TablePrice | None]] = {}

    def label(self, model: str, provider: str | None) -> str:
        """The bounded ``model`` label: an override key, a table model id, or ``other``."""
        if model in self._overrides:
            return model
        entry = self._lookup(model, provider)
        return entry.model_id if entry is not None else OTHER

    def cost(self, usage: Usage) -> tuple[str, float]:
        """The label and USD cost of one model's usage; raises ``UnpricedError``."""
        override = self._overrides.get(usage.model)
        if override is not None:
            return usage.model, (
                usage.prompt_tokens * override.input_per_mtok
                + usage.completion_tokens * override.output_per_mtok
                + usage.embedding_tokens * override.embedding_per_mtok
            ) / 1e6 + usage.rerank_units * override.rerank_per_kunit / 1e3
        entry = self._lookup(usage.model, usage.provider)
        if entry is None:
            raise UnpricedError("unknown_model")
        return entry.model_id, entry.cost(usage)

    def _lookup(self, model: str, provider: str | None) -> _TablePrice | None:
        key = (model, provider)
        now = self._clock()
        cached = self._table.get(key)
        if cached is not None and now - cached[0] < _PRICE_TTL_S:
            return cached[1]
        entry = _find_in_table(model, provider)
        if len(self._table) < _MAX_CACHED_MODELS or key in self._table:
            self._table[key] = (now, entry)
        return entry


def _find_in_table(model: str, provider: str | None) -> _TablePrice | None:
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    try:
        found = calc_price(PriceUsage(input_tokens=0), model, provider_id=provider)
    except (LookupError, ValueError):
        if provider is None:
            return None
        # The span's provider name may not be the table's id (e.g. "azure-openai").
        return _find_in_table(model, None)
    return _TablePrice(found.model.id, found.model_price)


class CostDetector(InlineDetector):
    """Exports ``rag_request_cost_usd``, ``rag_cost_usd_total{model}`` and unpriced counts."""

    name: ClassVar[str] = "cost"

    def __init__(
        self, config: CostConfig, registry: SidecarRegistry, slicer: Slicer | None = None
    ) -> None:
        self.prices = PriceBook(config.overrides)
        self._slicer = slicer or Slicer()
        self._slice_requests = SliceCounter(
            self._slicer,
            SLICE_COST_REQUESTS_TOTAL,
            "Priced production requests (complete or partial), by slice.",
            registry,
        )
        self._slice_usd = SliceCounter(
            self._slicer,
            SLICE_COST_USD_TOTAL,
            "Cost in USD of priced production requests, by slice.",
            registry,
        )
        per_request = Histogram(
            REQUEST_COST_USD,
            "Cost of one RAG request in USD (all models it used), by variant.",
            ["variant"],
            buckets=COST_BUCKETS,
            registry=registry,
        )
        self._per_request = ByVariant(per_request.labels)
        self._by_model = Counter(
            COST_USD_TOTAL,
            "Spend in USD by model (overrides and price-table models; others 'other') and variant.",
            ["model", "variant"],
            registry=registry,
        )
        self._unpriced = Counter(
            COST_UNPRICED_REQUESTS_TOTAL,
            "Requests with a usage entry that could not be priced, by reason.",
            ["reason"],
            registry=registry,
        )
        pricing = Counter(
            COST_REQUESTS_TOTAL,
            "Requests by how much of their usage was priced: complete, partial (the observed "
            "cost is a lower bound) or unpriced (not observed), and variant.",
            ["pricing", "variant"],
            registry=registry,
        )
        # Bound once: a labels() lookup per request shows in the ingest profile.
        self._complete, self._partial, self._none_priced = (
            ByVariant(functools.partial(pricing.labels, value))
            for value in ("complete", "partial", "unpriced")
        )
        self._missing = MissingInputs(registry, self.name, ("usage",))
        # Spend children by (model label, variant), bound on first use like the others: the
        # labels are bounded (the price table's models, other; service.variants).
        self._spend: dict[tuple[str, str], Counter] = {}

    def observe(self, trace: RagTrace) -> None:
        usages = [u for u in trace.usage if _has_usage(u)]
        if trace.cost_usd is not None:
            # The producer's own figure wins; it is booked on the generating model.
            generator = next((u for u in usages if u.completion_tokens), None)
            label = self.prices.label(generator.model, generator.provider) if generator else OTHER
            self._book(trace, trace.cost_usd, {label: trace.cost_usd})
            self._complete.of(trace).inc()
            return
        if not usages:
            self._missing.count("usage")
            self._unpriced.labels("no_usage").inc()
            self._none_priced.of(trace).inc()
            return
        by_model: dict[str, float] = {}
        unpriced_reasons: set[str] = set()
        for usage in usages:
            try:
                label, cost = self.prices.cost(usage)
            except UnpricedError as exc:
                unpriced_reasons.add(exc.reason)
                continue
            by_model[label] = by_model.get(label, 0.0) + cost
        for reason in unpriced_reasons:
            self._unpriced.labels(reason).inc()
        if not by_model:
            self._none_priced.of(trace).inc()
            return
        (self._partial if unpriced_reasons else self._complete).of(trace).inc()
        self._book(trace, sum(by_model.values()), by_model)

    def _book(self, trace: RagTrace, total: float, by_model: dict[str, float]) -> None:
        variant = variant_of(trace)
        self._per_request[variant].observe(total)
        if variant == PRODUCTION and self._slicer.enabled:
            slices = self._slicer.of(trace)
            self._slice_requests.inc(slices)
            self._slice_usd.inc(slices, amount=total)
        for label, cost in by_model.items():
            spend = self._spend.get((label, variant))
            if spend is None:
                spend = self._spend[label, variant] = self._by_model.labels(label, variant)
            spend.inc(cost)


def _has_usage(usage: Usage) -> bool:
    return any(
        (usage.prompt_tokens, usage.completion_tokens, usage.embedding_tokens, usage.rerank_units)
    )
