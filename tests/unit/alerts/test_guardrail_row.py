"""The dashboard's first row: one stat per guardrail coloured against its threshold, the
firing alerts with their runbooks, the worst slices; every query reads what the rules
record (or, where no recording summarises it, the raw series an alert reads)."""

from __future__ import annotations

import re

from alerts.backtest import raw_names
from alerts.dashboard import build_dashboard
from alerts.guardrail_row import ALERTS_TITLE, SLICES_TITLE, TITLE
from alerts.guardrail_series import recorded_names, runbooks
from alerts.rules import build_rules
from monitor.contract.config import Config

NAMES = re.compile(r"(?<![\w:])(rag[:_][\w:]+)")


def _first_row(config: Config) -> list[dict]:
    panels = build_dashboard(config)["panels"]
    assert panels[0]["type"] == "row"
    assert panels[0]["title"] == TITLE
    second_row = next(i for i, p in enumerate(panels[1:], 1) if p["type"] == "row")
    return panels[1:second_row]


def test_first_row_has_a_stat_per_guardrail_coloured_by_state() -> None:
    config = Config()
    stats = [p for p in _first_row(config) if p["type"] == "stat"]
    titles = [p["title"] for p in stats]
    assert titles == [
        "Faithfulness pass share",
        "False-exclusion rate",
        "Latency SLO: total slower than 1.5s",
        "Cost per query",
        "Query drift: MMD test p-value",
    ]
    faithfulness, false_exclusion, latency, cost, _ = stats
    steps = faithfulness["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps == [{"color": "red", "value": None}, {"color": "green", "value": 0.85}]
    assert [s["value"] for s in latency["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [
        None, 0.05, 0.1,
    ]  # fmt: skip
    # the corrected share where its recording exists, else the judge's own
    value = faithfulness["targets"][0]["expr"]
    assert value.index("corrected_ratio6h") < value.index(" or ") < value.index("ratio_rate6h")
    # the evidence count is a plain number, not coloured by the guardrail
    for panel in (faithfulness, false_exclusion, latency, cost):
        [override] = panel["fieldConfig"]["overrides"]
        count = override["matcher"]["options"]
        assert count == panel["targets"][-1]["refId"]
        assert {"id": "color", "value": {"mode": "fixed", "fixedColor": "text"}} in override[
            "properties"
        ]
    assert all(t["instant"] for p in stats for t in p["targets"])


def test_every_first_row_query_reads_recorded_or_alerted_series() -> None:
    config = Config()
    document = build_rules(config)
    recorded = recorded_names(document)
    alerted = raw_names(document)
    for panel in _first_row(config):
        for target in panel["targets"]:
            names = NAMES.findall(target["expr"])
            for name in names:
                if ":" in name:
                    assert name in recorded, (panel["title"], name)
                else:  # drift and the cost count: the raw series their alerts read
                    assert name in alerted, (panel["title"], name)


def test_firing_alerts_link_their_runbooks() -> None:
    config = Config()
    [table] = [p for p in _first_row(config) if p["title"] == ALERTS_TITLE]
    expr = table["targets"][0]["expr"]
    for name, link in runbooks(build_rules(config)).items():
        assert f'alertname="{name}"}}, "runbook", "{link}"' in expr
    [override] = table["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byName", "options": "runbook"}
    assert override["properties"][0]["value"][0]["url"] == "${__value.raw}"


def test_worst_slices_rank_on_the_bounds_the_rules_record() -> None:
    config = Config()
    recorded = recorded_names(build_rules(config))
    slices = [p for p in _first_row(config) if p["title"] == SLICES_TITLE]
    if not any(name.startswith("rag:slice_faithfulness_pass") for name in recorded):
        assert slices == []  # no slice recordings generated: no empty panel
        return
    [panel] = slices
    exprs = [t["expr"] for t in panel["targets"]]
    assert 'bottomk(5, rag:slice_faithfulness_pass:upper_bound6h{job=~"$job"})' in exprs
    assert 'topk(5, rag:slice_false_exclusion:lower_bound6h{job=~"$job"})' in exprs
