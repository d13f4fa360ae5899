"""What an LLM judge's reply used and what that costs: ``Usage`` (tokens in and out, as
the reply reports them) and ``Prices`` (USD per token, configured or from the
genai-prices table). Imports nothing of the detector, so the section's validation and
the judge's metrics both price with it."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one reply says it used."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per token in and out, or a genai-prices entry for tiered prices."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    table_entry: Any = None  # genai_prices ModelPrice

    @classmethod
    def lookup(cls, model: str) -> Prices | None:
        """The genai-prices entry for ``model``; None when the table does not know it."""
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price

        try:
            found = calc_price(PriceUsage(input_tokens=0), model)
        except (LookupError, ValueError):
            return None
        return cls(table_entry=found.model_price)

    def cost(self, usage: Usage) -> float:
        if self.table_entry is None:
            spent = usage.input_tokens * self.input_per_mtok
            return (spent + usage.output_tokens * self.output_per_mtok) / _MTOK
        from genai_prices import Usage as PriceUsage

        counts = PriceUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        return float(Decimal(self.table_entry.calc_price(counts)["total_price"]))
