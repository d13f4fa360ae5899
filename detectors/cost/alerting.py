"""The cost detector's rules and panels: mean cost per query against
``guardrails.cost_per_query_max_usd``, spend by model, and how much was priced."""

from __future__ import annotations

from pathlib import Path

from detectors.cost.config import CostConfig
from detectors.cost.names import (
    COST_REQUESTS_TOTAL,
    COST_UNPRICED_REQUESTS_TOTAL,
    COST_USD_TOTAL,
    REQUEST_COST_USD,
    cost_per_query,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    alert,
    enough,
    panel_rate,
    panel_ratio,
    production,
    ratio,
    sum_rate,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: CostConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """The mean cost per query per job, and the alert on the budget."""
    window, budget = guardrails.window, guardrails.cost_per_query_max_usd
    recorded = cost_per_query(window)
    count, total = production(f"{REQUEST_COST_USD}_count"), production(f"{REQUEST_COST_USD}_sum")
    recording = {
        "record": recorded,
        "expr": ratio(sum_rate(total, window), sum_rate(count, window)),
    }
    high = alert(
        guardrails,
        "RagCostPerQueryHigh",
        f"{recorded} > {budget}\n" + enough(guardrails, count, window),
        severity="ticket",
        summary=f"Mean cost per query is above the {budget:g} USD budget ({{{{ $labels.job }}}})",
        description=f"Requests in the last {window} cost "
        f'{{{{ $value | printf "%.4f" }}}} USD each on average; the budget is {budget:g} USD.',
    )
    return RuleFragment(recording=[recording], alerting=[high], promtool_tests=PROMTOOL_TESTS)


def rows(config: CostConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Cost per query against the budget, spend by model, priced and unpriced requests."""
    per_query = panel_ratio(
        panel_rate(f"{REQUEST_COST_USD}_sum", guardrail=True),
        panel_rate(f"{REQUEST_COST_USD}_count", guardrail=True),
    )
    panels = [
        Panel(
            "Cost per query",
            [
                (per_query, "USD per query"),
                (f"vector({guardrails.cost_per_query_max_usd})", "budget"),
            ],
            unit="currencyUSD",
        ),
        Panel(
            "Spend by model (USD/h)",
            [(f"3600 * {panel_rate(COST_USD_TOTAL, by='model', guardrail=True)}", "{{model}}")],
            unit="currencyUSD",
        ),
        Panel(
            "Cost coverage (partial: cost per query is a lower bound)",
            [
                (panel_rate(COST_REQUESTS_TOTAL, by="pricing", guardrail=True), "{{pricing}}"),
                (panel_rate(COST_UNPRICED_REQUESTS_TOTAL, by="reason"), "unpriced: {{reason}}"),
            ],
            unit="ops",
        ),
    ]
    return [Row("Cost", panels)]
