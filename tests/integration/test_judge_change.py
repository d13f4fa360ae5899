"""A change of faithfulness judge in a real Prometheus: the simulated world's counters
imported with promtool and the faithfulness rules backfilled, as the backtest does. The
first judge runs a day, then another (``judge_change``); a faithfulness incident starts
two hours after the change. Before the change the corrected share rests on the first
judge's reviews; after it no series mixes the two judges, the page tests the new judge's
own bound until its reviews reach ``min_random_reviews``, then its corrected bound; and
the dashboard's judge-change annotation marks the change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alerts.backtest import Window, backfill
from alerts.backtest_command import parse_incident
from alerts.rules import build_rules
from alerts.scratch import ScratchPrometheus, import_openmetrics, query_range
from alerts.simulate import simulate, write_openmetrics
from detectors.faithfulness.alerting import rows
from detectors.faithfulness.simulate import JUDGES
from monitor.contract.rulekit.simulation import DEFAULT_START_S, World
from monitor.runtime.config_loading import load_config
from tests.integration.conftest import binary

pytestmark = pytest.mark.integration

DAY = 86_400
HOUR = 3_600
STEP = 60.0
OLD, NEW = JUDGES
CHANGE = DEFAULT_START_S + DAY
MIN_REVIEWS = 100  # guardrails.review_correction.min_random_reviews, the default


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """A scratch Prometheus holding three simulated days and the faithfulness rules
    recorded over them; its URL and the rule document."""
    promtool, server_binary = binary("promtool"), binary("prometheus")
    work = tmp_path_factory.mktemp("judge-change")
    world = World(
        requests_per_day=272_000,
        duration_s=3 * DAY,
        incidents=[
            parse_incident("judge_change:1d:2d"),
            parse_incident("faithfulness:1d2h:1d22h"),
        ],
        reviews_per_week=2_000,  # about 12 random reviews an hour
    )
    config = load_config()
    samples = simulate(world, config)
    counters = work / "counters.txt"
    write_openmetrics(samples, counters)
    document = build_rules(config)
    faithfulness = [
        rule
        for group in document["groups"]
        for rule in group["rules"]
        if rule.get("record", "").startswith("rag:faithfulness_")
        or rule.get("alert") == "RagFaithfulnessLow"
    ]
    server = ScratchPrometheus(server_binary, work)
    import_openmetrics(promtool, counters, server.data)
    window = Window(DEFAULT_START_S, DEFAULT_START_S, DEFAULT_START_S + 3 * DAY - STEP, STEP)
    with server:
        # the recordings the page reads, as the backtest backfills them
        backfill(promtool, server, {"groups": [{"name": "r", "rules": faithfulness}]}, window)
        yield server.url, {"rules": faithfulness}


def query(url: str, expr: str, start: float, end: float) -> dict[frozenset[Any], list[Any]]:
    return query_range(url, expr, start, end, STEP)


def judges_of(series: dict[frozenset[Any], list[Any]]) -> set[str]:
    return {dict(labels).get("judge", "") for labels in series}


def test_before_the_change_the_correction_rests_on_the_first_judges_reviews(
    prometheus: tuple[str, dict[str, Any]],
) -> None:
    url, _ = prometheus
    before = CHANGE - 10 * 60
    reviewed = query(url, "rag:faithfulness_reviewed:increase28d", before, before)
    [(labels, [(_, value)])] = reviewed.items()
    assert dict(labels)["judge"] == OLD
    assert float(value) >= MIN_REVIEWS  # a day at about 12 an hour
    corrected = query(url, "rag:faithfulness_pass:debiased_upper_bound6h", before, before)
    assert judges_of(corrected) == {OLD}


def test_after_the_change_no_series_mixes_the_judges_and_the_old_ones_stop(
    prometheus: tuple[str, dict[str, Any]],
) -> None:
    url, _ = prometheus
    recorded = '{__name__=~"rag:faithfulness_.+"}'
    # Backfilled samples carry no staleness markers: each layer of recordings reads the one
    # below for the 5-minute lookback after its last sample (in a running Prometheus the
    # stopped target's and the rules' stale markers end them at once).
    after = query(url, f"count by (judge) ({recorded})", CHANGE + 30 * 60, CHANGE + 2 * DAY - HOUR)
    assert judges_of(after) == {NEW}
    before = query(url, f"count by (judge) ({recorded})", CHANGE - 2 * HOUR, CHANGE - 60)
    assert judges_of(before) == {OLD}


def test_the_page_uses_the_new_judges_own_bound_until_its_reviews_suffice(
    prometheus: tuple[str, dict[str, Any]],
) -> None:
    url, document = prometheus
    enough = query(
        url, f'rag:faithfulness_reviewed:increase28d{{judge="{NEW}"}} >= {MIN_REVIEWS}',
        CHANGE, CHANGE + 2 * DAY - HOUR,
    )  # fmt: skip
    [points] = enough.values()
    sufficed = points[0][0]
    assert CHANGE + 4 * HOUR < sufficed < CHANGE + 14 * HOUR  # 100 reviews at ~12 an hour
    fired: dict[str, list[float]] = {"judge": [], "corrected": []}
    for rule in document["rules"]:
        if "alert" not in rule:
            continue
        for labels, firing in query(url, rule["expr"], CHANGE, CHANGE + 2 * DAY - HOUR).items():
            named = dict(labels)
            assert named["judge"] == NEW
            fired[named["estimate"]] += [t for t, _ in firing]
    assert fired["judge"], "the new judge's own bound pages on the incident"
    assert min(fired["judge"]) < sufficed
    assert fired["corrected"], "once its reviews suffice, its corrected bound pages"
    assert min(fired["corrected"]) >= sufficed


def test_the_dashboard_marks_the_judge_change(prometheus: tuple[str, dict[str, Any]]) -> None:
    url, _ = prometheus
    [row] = rows(None, load_config().guardrails)
    [annotation] = row.annotations
    expr = annotation.expr.replace('job=~"$job"', 'job=~".+"')
    marked = query(url, expr, CHANGE - HOUR, CHANGE + 2 * DAY - HOUR)
    assert judges_of(marked) == {NEW}
    [times] = [[t for t, _ in points] for points in marked.values()]
    assert min(times) >= CHANGE
    assert max(times) <= CHANGE + 11 * 60
