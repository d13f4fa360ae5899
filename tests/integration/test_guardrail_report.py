"""``rag-monitor report guardrails`` against a real Prometheus holding a backfilled week:
the simulated world's counters (one faithfulness incident, a judge change) imported with
promtool, a release, drift, cost and the coverage matrix written beside them, the
recordings the report reads backfilled as the backtest backfills them, and the alerts'
firings written as ``ALERTS`` (promtool's rule backfill ignores alerting rules: a running
Prometheus writes ``ALERTS`` itself as it evaluates them; here the backtest's replay of
each alert, ``for`` included, stands in for that). The report is written as HTML and
Markdown, and the HTML opened in headless Chromium: the figures render, and the hostile
label values planted in production text show as text. The run writes the docs site's
screenshot docs/pages/images/weekly-report.png."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from alerts.backtest import Window, alert_rules, backfill, replay
from alerts.backtest_command import parse_incident
from alerts.field_coverage import needed_fields
from alerts.guardrail_series import guardrails, recorded_names
from alerts.rules import build_rules
from alerts.scratch import ScratchPrometheus, import_openmetrics, write_openmetrics_series
from alerts.simulate import simulate, write_openmetrics
from monitor.contract.components import load_components
from monitor.contract.rulekit.simulation import DEFAULT_START_S, World
from monitor.runtime.config_loading import load_config
from tests.integration.conftest import binary, headless_chromium

pytestmark = pytest.mark.integration

DAY, HOUR = 86_400, 3_600
DAYS = 7
STEP = 300.0  # the backfill's evaluation interval: a week at one a minute is 5x slower
END = DEFAULT_START_S + DAYS * DAY - STEP
RELEASE_AT = DEFAULT_START_S + 2 * DAY + 10 * HOUR
EMBEDDING_CHANGE_AT = DEFAULT_START_S + 5 * DAY
# Production text is hostile: a version, an intent and a judge-visible label value.
HOSTILE_VERSION = "2.0<img src=x onerror=window.__pwned=1>"
HOSTILE_INTENT = "<script>window.__pwned=2</script>refunds"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "pages" / "images"
TARGET = {"job": "rag-monitor", "instance": "simulated:9464"}


def _gauge(samples: Any, name: str, labels: dict[str, str], values: np.ndarray) -> None:
    samples.add_gauge(name, {**TARGET, **labels}, values.astype(float))


def _production_world(samples: Any, requests: np.ndarray) -> None:
    """What the simulation has no hook for, as the sidecar exports it: a release, cost,
    drift tests and an embedding-model change, and the coverage matrix."""
    times = samples.timestamps.astype(float)
    nan = np.full(len(times), np.nan)
    before = times < RELEASE_AT
    _gauge(
        samples,
        "rag_release_first_seen_timestamp_seconds",
        {"service": "rag-api", "version": "1.4.0"},
        np.full(len(times), float(DEFAULT_START_S)),
    )
    _gauge(
        samples,
        "rag_release_first_seen_timestamp_seconds",
        {"service": "rag-api", "version": HOSTILE_VERSION},
        np.where(before, nan, RELEASE_AT),
    )
    priced = {**TARGET, "variant": "production"}
    cost = np.where(before, 0.012, 0.024)  # the release makes answers dearer than the budget
    samples.add("rag_request_cost_usd_count", priced, requests)
    samples.add("rag_request_cost_usd_sum", priced, requests * cost)
    rng = np.random.default_rng(7)
    p_values = np.where(times >= EMBEDDING_CHANGE_AT, 0.002, rng.uniform(0.05, 1, len(times)))
    signal = {"signal": "query_embedding"}
    _gauge(samples, "rag_drift_p_value", signal, p_values)
    _gauge(samples, "rag_drift_mmd_statistic", signal, 0.002 / np.maximum(p_values, 1e-3))
    _gauge(samples, "rag_drift_detected", signal, (p_values < 0.01).astype(float))
    for name, on in (
        ("minilm-l6", times < EMBEDDING_CHANGE_AT),
        ("e5-small", times >= EMBEDDING_CHANGE_AT),
    ):
        _gauge(
            samples,
            "rag_drift_representation_info",
            {"representation": name},
            np.where(on, 1.0, nan),
        )
    cells = {
        ("billing", "application/pdf"): 0.3,
        (HOSTILE_INTENT, "text/html"): 0.5,
        ("billing", "none"): 0.2,
    }
    for (intent, document_type), share in cells.items():
        labels = {**TARGET, "intent": intent, "document_type": document_type}
        samples.add("rag_coverage_requests_total", labels, np.round(requests * share))
    samples.add("rag_review_sampled_total", {**TARGET, "stratum": "random"}, (requests > 0) * 1.0)


def _write_alerts(url: str, document: dict[str, Any], window: Window, out: Path) -> int:
    """The alerts' firings as ``ALERTS`` samples (the backtest's replay); how many runs."""
    times = window.evaluations
    by_alert: dict[tuple[str, str], list[Any]] = {}
    for rule in alert_rules(document):
        by_alert.setdefault((rule.name, rule.severity), []).append(rule)
    runs = 0
    with out.open("w") as file:
        for (name, severity), rules in by_alert.items():
            summary = replay(url, rules, window)
            firing = times[summary.firing]
            runs += summary.firings
            if firing.size:
                labels = {**TARGET, "alertname": name, "alertstate": "firing", "severity": severity}
                stamps = [str(int(t)) for t in firing.tolist()]
                write_openmetrics_series(file, "ALERTS", labels, stamps, ["1"] * len(stamps))
        file.write("# EOF\n")
    return runs


# Four intents x two document types: the simulated faithfulness is counted by slice too.
SLICED = """
detectors:
  slices:
    intents: [account, billing, returns, shipping]
    document_types: [application/pdf, text/html]
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    promtool, server_binary = binary("promtool"), binary("prometheus")
    work = tmp_path_factory.mktemp("guardrail-report")
    world = World(
        requests_per_day=40_000,
        duration_s=DAYS * DAY,
        incidents=[
            parse_incident("judge_change:3d:4d"),
            parse_incident("faithfulness:4d12h:8h"),
        ],
        reviews_per_week=1_500,
    )
    config_file = work / "monitor.yaml"
    config_file.write_text(SLICED)
    config = load_config(config_file)
    fields = needed_fields(config, load_components())
    samples = simulate(world, config, fields)
    requests = next(values for name, _, values in samples.series if name == "rag_requests_total")
    _production_world(samples, np.diff(requests, prepend=0.0))
    counters = work / "counters.txt"
    write_openmetrics(samples, counters)
    document = build_rules(config)
    # The recordings the report reads and the alerts read, with what they read in turn:
    # recording_layers keeps those some alert reads, so one more stands for the report.
    read = [
        g.expr(part, 'job="x"')
        for g in guardrails(config, document)
        for part in ("value", "bound", "evidence")
    ]
    wanted = " or ".join(
        name
        for name in sorted(recorded_names(document))
        if any(name in expr for expr in read)
        or name.startswith(
            (
                "rag:faithfulness_reviewed",
                "rag:faithfulness_judge_bias",
                "rag:faithfulness_pass:corrected",
                "rag:slice_",
            )
        )
    )
    reader = {"alert": "ReportReads", "expr": wanted}
    backfilled = {"groups": [*document["groups"], {"name": "report", "rules": [reader]}]}
    server = ScratchPrometheus(server_binary, work)
    import_openmetrics(promtool, counters, server.data)
    window = Window(DEFAULT_START_S, DEFAULT_START_S + HOUR, END, STEP)
    with server:
        backfill(promtool, server, backfilled, window)
        alerts = work / "alerts.txt"
        assert _write_alerts(server.url, document, window, alerts) > 0
        staging = work / "alerts-blocks"
        import_openmetrics(promtool, alerts, staging)
        server.add_blocks(staging)
        yield server.url


def _report(url: str, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "report", "guardrails", "--prometheus", url,
         "--since", f"{DAYS}d", "--until", str(END), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_section_has_data_in_html_and_markdown(prometheus: str, tmp_path: Path) -> None:
    html_out, md_out = tmp_path / "guardrails.html", tmp_path / "guardrails.md"
    _report(prometheus, html_out)
    _report(prometheus, md_out)
    page = html_out.read_text()
    markdown = md_out.read_text()
    for heading in (
        "Events in the period", "Faithfulness pass share", "False-exclusion rate",
        "Latency SLO: total", "Cost per query", "Query drift", "Coverage: intent x document type",
        "Review progress, judge bias and effective reviews", "Field coverage", "Other reports",
    ):  # fmt: skip
        assert f"<h2>{heading}" in page, heading
        assert f"## {heading}" in markdown, heading
    # one figure per guardrail and the coverage heat map, as data URIs and as files
    assert page.count("src='data:image/png;base64,") == 6
    figures = sorted(tmp_path.glob("guardrails-*.png"))
    assert len(figures) == 6
    assert all(f.read_bytes().startswith(b"\x89PNG") for f in figures)
    # the scripted events: the release, the judge change and the embedding-model change
    assert "release rag-api 2.0&lt;img src=x onerror=window.__pwned=1&gt;" in page
    assert page.count("<td>judge</td>") == 1
    assert "embedding model e5-small" in page
    # the faithfulness incident fired its alert; the release's dearer answers the cost one
    assert "<td>RagFaithfulnessLow</td>" in page
    assert "<td>RagCostPerQueryHigh</td>" in page
    # review: random reviews, the judge's bias and the reviews the correction is worth
    assert "random reviews; bias (judge minus reviewers)" in page
    assert "reviews alone." in page
    assert "<td>contexts</td>" in page  # field coverage
    assert "<a href='drift.html'>drift.html</a>" in page
    assert "drift.md" in markdown
    # slices: the simulation counts faithfulness by slice (the other guardrails' slices
    # are not simulated, and say so)
    assert "no slice data in Prometheus for rag:slice_faithfulness" not in page
    assert "<h2>Slices: faithfulness</h2>" in page
    assert "account" in page  # the first intent, a slice of the simulated world


def test_the_page_renders_its_figures_and_runs_no_hostile_text(
    prometheus: str, tmp_path: Path
) -> None:
    out = tmp_path / "guardrails.html"
    _report(prometheus, out)
    with headless_chromium(1100, 1400) as browser:
        from selenium.webdriver.common.by import By

        browser.get(out.as_uri())
        images = browser.find_elements(By.TAG_NAME, "img")
        assert len(images) == 6
        for image in images:
            assert (
                browser.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth", image
                )
                > 0
            )
        # the hostile values are text: no element made of them, no script ran
        assert browser.find_elements(By.CSS_SELECTOR, "img[src='x'], script") == []
        assert browser.execute_script("return window.__pwned === undefined")
        body = browser.find_element(By.TAG_NAME, "body").text
        assert HOSTILE_VERSION in body
        assert HOSTILE_INTENT in body
        IMAGES.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(IMAGES / "weekly-report.png"))
        first = browser.find_elements(By.TAG_NAME, "img")[0]
        first.screenshot(str(IMAGES / "weekly-report-faithfulness.png"))
