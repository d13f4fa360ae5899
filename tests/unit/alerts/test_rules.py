"""Alert rules: the assembled output against promtool, the golden file, and the contract."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.rules import build_rules, render_rules, rule_fragments, write_promtool_suite
from monitor.contract.components import DetectorComponent, load_components
from monitor.contract.config import Config
from monitor.contract.rulekit.fragments import RuleFragment
from monitor.runtime.config_loading import ConfigError, load_config
from tests.conftest import REPO

ALERTS_DIR = REPO / "alerts"
GOLDEN = ALERTS_DIR / "tests" / "rules.yaml"
REGENERATE = "python -m monitor rules > alerts/tests/rules.yaml"

# The docs site's Alerts page: stable names, each with severity and a runbook link to its section.
STABLE_ALERTS = {
    "RagFaithfulnessLow",
    "RagStageLatencySLOBreach",
    "RagStageLatencySLOBudgetBurn",  # the latency SLO's ticket tier (issue 17)
    "RagFilterFalseExclusionHigh",
    "RagRegenerationRateAnomalous",
    "RagCostPerQueryHigh",
    "RagQueryDriftDetected",
    "RagEmbeddingModelChanged",
    "RagEntitlementViolation",
    "RagMonitorDown",
    "RagMonitorDeadLetters",
    "RagMonitorSheddingSamples",
    "RagMonitorWorkerDown",
    "RagMonitorStateNearFull",
    "RagMonitorTraceTooLarge",
    "RagTraceFieldMissing",  # issue 24: a field an enabled detector reads is missing
    "RagEvaluationFailing",  # issue 28: an evaluator's pass share below its guardrail
    "RagJudgeBiased",  # issue 33: a judge's pass share off the reviewers' on the same items
    # issue 44: a guardrail breached in one slice (intent, document type)
    "RagSliceFaithfulnessLow",
    "RagSliceFalseExclusionHigh",
    "RagSliceLatencySlow",
    "RagSliceCostPerQueryHigh",
}
DETECTORS = [
    "latency", "release", "cost", "feedback", "slices", "faithfulness", "evaluations",
    "filter_exclusion", "drift", "review", "shadow",
]  # fmt: skip
WITHOUT_RULES = {"release", "shadow"}  # release: its gauge feeds every guardrail alert's
# suspected_cause; shadow: a shadow serves no user, its deltas feed `report shadow`


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: prometheus / prometheus-alertmanager)")
    return path


def cli_rules(tmp_path: Path, config_text: str | None = None) -> str:
    argv = [sys.executable, "-m", "monitor", "rules"]
    if config_text is not None:
        config_path = tmp_path / "monitor.yaml"
        config_path.write_text(config_text)
        argv += ["--config", str(config_path)]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def alerts_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def test_cli_rules_pass_promtool_check(tmp_path: Path) -> None:
    """`rag-monitor rules` prints a rule file that `promtool check rules` accepts."""
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(cli_rules(tmp_path))
    result = subprocess.run(
        [tool("promtool"), "check", "rules", str(rules_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_golden_rule_file_is_the_current_generator_output(tmp_path: Path) -> None:
    """alerts/tests/rules.yaml (the reviewed rule file) equals the defaults' output."""
    assert GOLDEN.read_text() == render_rules(Config()), f"regenerate it: {REPO}$ {REGENERATE}"
    assert cli_rules(tmp_path) == GOLDEN.read_text()


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    """Every fragment's promtool unit tests pass against the assembled rule file."""
    # Relative names: promtool offsets a group's evaluations by a hash of its rule file's
    # path, and the seasonal band's expected values depend on those times. A temporary
    # directory in the path would make them change from run to run.
    test_files = [path.name for path in write_promtool_suite(Config(), tmp_path)]
    # one file per detector with rules, one of field coverage, one of the sidecar
    assert len(test_files) == len(DETECTORS) - len(WITHOUT_RULES) + 2
    # One promtool a file, all at once: each evaluates its file's tests on one core, and
    # one after the other they took over three minutes of the suite.
    runs = {
        name: subprocess.Popen(
            [tool("promtool"), "test", "rules", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        for name in test_files
    }
    outputs = {name: run.communicate()[0] for name, run in runs.items()}
    assert {name: outputs[name] for name, run in runs.items() if run.returncode} == {}


def test_promtool_tests_cover_every_alert_firing_and_silent() -> None:
    """Each alert has an expected firing and an expected silence in its own fragment's tests."""
    for owner, fragment in rule_fragments(Config()):
        firing: set[str] = set()
        silent: set[str] = set()
        for path in fragment.promtool_tests:
            for test in yaml.safe_load(path.read_text())["tests"]:
                for case in test.get("alert_rule_test", []):
                    (firing if case["exp_alerts"] else silent).add(case["alertname"])
        own = {rule["alert"] for rule in fragment.alerting}
        assert (firing, silent) == (own, own), owner


def test_rules_come_from_the_registered_components_in_order() -> None:
    """The detectors are registered by order; their fragments precede the collectors', then
    come field coverage's and the sidecar's own."""
    assert [component.name for component in load_components()] == DETECTORS
    collectors = ["spans", "otlp_http", "otlp_grpc", "kafka"]
    owners = [owner for owner, _ in rule_fragments(Config())]
    assert owners == [*DETECTORS, *collectors, "coverage", "monitor"]


def test_a_component_fragment_joins_the_rule_file() -> None:
    """A component's recording and alerting rules land in their groups, after the earlier ones."""
    toy = DetectorComponent(
        name="toy",
        config_model=Config,
        description="a toy",
        build=lambda config, context: None,  # type: ignore[arg-type,return-value]
        rules=lambda config, guardrails: RuleFragment(
            recording=[{"record": "rag:toy:sum", "expr": "sum(rag_toy_total)"}],
            alerting=[{"alert": "RagToy", "expr": "rag:toy:sum > 1"}],
        ),
    )
    recording, alerting = build_rules(Config(), [*load_components(), toy])["groups"]
    # before field coverage's 3 recordings and 1 ticket, and the sidecar's 6 alerts
    assert recording["rules"][-4] == {"record": "rag:toy:sum", "expr": "sum(rag_toy_total)"}
    assert [rule["alert"] for rule in alerting["rules"]][-8] == "RagToy"


def test_every_design_alert_has_severity_and_annotations() -> None:
    """All stable alert names exist, each with page/ticket severity, summary, description, runbook."""
    alerts = alerts_of(build_rules(Config()))
    assert {rule["alert"] for rule in alerts} == STABLE_ALERTS
    for rule in alerts:
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        annotations = rule["annotations"]
        # the sidecar's own, field coverage and the judge's bias: their cause is the sidecar,
        # the mapping or the judge, never a release or drift of the service
        triaged = not rule["alert"].startswith(
            ("RagMonitor", "RagTraceFieldMissing", "RagJudgeBiased")
        )
        expected = {"summary", "description", "runbook"} | (
            {"suspected_cause"} if triaged else set()
        )
        assert set(annotations) == expected, rule["alert"]
        assert all(annotations.values()), rule["alert"]
        assert annotations["runbook"] == f"http://127.0.0.1:8000/alerts/#{rule['alert'].lower()}"


def test_entitlement_violation_pages_without_for() -> None:
    """RagEntitlementViolation is a page with `for: 0s`; evidence alerts hold for two
    evaluation intervals; the guardrails' `for` applies to point-value alerts (cost)."""
    by_name = {rule["alert"]: rule for rule in alerts_of(build_rules(Config()))}
    violation = by_name["RagEntitlementViolation"]
    assert (violation["labels"]["severity"], violation["for"]) == ("page", "0s")
    assert by_name["RagFaithfulnessLow"]["for"] == "2m"
    assert by_name["RagCostPerQueryHigh"]["for"] == "10m"


def test_config_sets_thresholds_stages_and_for(tmp_path: Path) -> None:
    """Guardrails from --config: a page and a ticket per SLO stage with its threshold's
    bucket and budget, the faithfulness minimum, the cost budget and its `for`."""
    text = cli_rules(
        tmp_path,
        "guardrails:\n"
        "  faithfulness_min: 0.9\n"
        "  latency_slo:\n"
        "    generate: {objective: 0.99, threshold_s: 0.75}\n"
        "    total: {objective: 0.9, threshold_s: 2.5, page_burn_rate: 3}\n"
        "  cost_per_query_max_usd: 0.05\n"
        "  evaluation_interval: 30s\n"
        "  for: 3m\n",
    )
    document = yaml.safe_load(text)
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in alerts_of(document):
        rules.setdefault(rule["alert"], []).append(rule)
    page, ticket = rules["RagStageLatencySLOBreach"], rules["RagStageLatencySLOBudgetBurn"]
    assert [r["labels"]["slo_seconds"] for r in page] == ["0.75", "2.5"]
    assert 'slow_ratio_lower_bound1h{stage="generate"} > 0.02\n' in page[0]["expr"]
    assert 'slow_ratio_lower_bound1h{stage="total"} > 0.3\n' in page[1]["expr"]
    assert 'slow_ratio_lower_bound6h{stage="total"} > 0.1\n' in ticket[1]["expr"]
    recorded = [r["expr"] for r in document["groups"][0]["rules"] if "record" in r]
    assert any('stage="generate", le="0.75", variant="production"' in e for e in recorded)
    assert all("< 0.9" in r["expr"] for r in rules["RagFaithfulnessLow"])
    assert "> 0.05" in rules["RagCostPerQueryHigh"][0]["expr"]
    assert rules["RagCostPerQueryHigh"][0]["for"] == "3m"
    assert all(r["for"] == "1m" for r in [*page, *ticket, *rules["RagFaithfulnessLow"]])


def test_latency_slo_threshold_must_be_a_bucket_bound() -> None:
    """A latency SLO threshold between bucket bounds is refused at load, naming the key
    and the bounds to pick from."""
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"RAG_MONITOR_GUARDRAILS__LATENCY_SLO": "{total: {threshold_s: 1.2}}"})
    [problem] = caught.value.problems
    assert problem.startswith("guardrails.latency_slo.total.threshold_s: Value error, 1.2 is not")
    assert "pick one of 0.005, 0.01" in problem


def test_every_guardrail_rule_reads_production_traffic_only() -> None:
    """Every raw series a guardrail rule reads carries variant="production"."""
    guardrail_metrics = (
        "rag_requests_total", "rag_faithfulness_", "rag_filter_eligible", "rag_filter_false",
        "rag_stage_latency_seconds", "rag_request_cost_usd", "rag_feedback_events_total",
    )  # fmt: skip
    document = build_rules(Config())
    exprs = [rule["expr"] for group in document["groups"] for rule in group["rules"]]
    selectors = [
        selector
        for expr in exprs
        for selector in re.findall(r"(rag_[a-z_]+(?:\{[^}]*\})?)\[", expr)
        if selector.startswith(guardrail_metrics)
    ]
    assert selectors, "no guardrail selector found"
    assert all('variant="production"' in selector for selector in selectors), selectors


def test_derived_bounds_are_written_in_the_rule_file_and_follow_the_budget() -> None:
    """The rule file states the z each evidence alert derived; a larger page budget
    lowers the faithfulness bound's z, and the alerts use the stated value."""
    tight, loose = (
        Config(),
        Config.model_validate({"guardrails": {"false_alerts_per_week": {"page": 5}}}),
    )
    zs = []
    for config in (tight, loose):
        text = render_rules(config)
        stated = re.search(r"#   RagFaithfulnessLow 30m: .* at z ([\d.]+) ", text)
        assert stated is not None, text[:2000]
        zs.append(float(stated[1]))
        assert f"+ {stated[1]} * sqrt(rag:faithfulness_pass:ratio_rate30m" in text
    assert zs[0] > zs[1] > 2


def test_release_window_sets_the_suspected_cause_query() -> None:
    """guardrails.release_window is the look-back of suspected_cause and of the restart-proof
    first sight (min_over_time), in the annotation of every guardrail alert."""
    # An alert whose rule knows the change it reports names it instead (detectors/drift).
    known_cause = {"RagEmbeddingModelChanged": "embedding_model_change"}
    config = Config.model_validate({"guardrails": {"release_window": "90m"}})
    for rule in alerts_of(build_rules(config)):
        cause = rule["annotations"].get("suspected_cause")
        if cause is None:
            continue
        if rule["alert"] in known_cause:
            assert cause == known_cause[rule["alert"]]
            continue
        assert cause == (
            '{{ if query "min by (service, version) '
            '(min_over_time(rag_release_first_seen_timestamp_seconds[90m])) > time() - 5400" }}'
            "regression{{ else }}drift{{ end }}"
        ), rule["alert"]
        assert "rag_release_first_seen_timestamp_seconds[90m]" in rule["annotations"]["description"]


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("window", "5 minutes", "guardrails.window: Value error, '5 minutes' is not a duration"),
        (
            "sample_windows",
            "[30m, 1.5h]",
            "guardrails.sample_windows.1: Value error, '1.5h' is not a duration",
        ),
        ("baseline", "week", "guardrails.baseline: Value error, 'week' is not a duration"),
        ("min_events", "0", "guardrails.min_events: Input should be greater than or equal to 1"),
        ("release_window", "6 h", "guardrails.release_window: Value error, '6 h' is not a"),
    ],
    ids=["window", "sample_windows", "baseline", "min_events", "release_window"],
)
def test_bad_rule_settings_are_refused(key: str, value: str, problem: str) -> None:
    """Malformed windows or evidence counts are config errors naming the guardrails key."""
    with pytest.raises(ConfigError) as caught:
        load_config(environ={f"RAG_MONITOR_GUARDRAILS__{key.upper()}": value})
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(problem)


def test_window_setting_renames_recordings_consistently() -> None:
    """A 15s window renames the p95 recording; SLO windows rename theirs and every alert
    refers to the renamed ones."""
    text = render_rules(
        Config.model_validate(
            {"guardrails": {"window": "15s", "slo_windows": {"page": ["20m", "2m"]}}}
        )
    )
    assert "rag:stage_latency_seconds:p95_15s" in text
    assert "p95_5m" not in text
    assert "slow_ratio_lower_bound20m{stage=" in text
    assert "slow_ratio_lower_bound1h" not in text


def test_alertmanager_example_routes_page_and_ticket() -> None:
    """alerts/alertmanager.yml passes amtool check-config; page -> pager, ticket -> ticket."""
    amtool = tool("amtool")
    config = str(ALERTS_DIR / "alertmanager.yml")
    check = subprocess.run(
        [amtool, "check-config", config], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    for severity, receiver in (("page", "pager"), ("ticket", "ticket")):
        route = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={config}",
             f"severity={severity}", "alertname=RagEntitlementViolation"],
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        assert route.stdout.strip() == receiver, route.stdout + route.stderr


def test_demo_evaluator_reads_the_generated_conditions() -> None:
    """demo.rule_evaluation computes recorded series, Wilson bounds and alert readings
    (state, estimate, bound, evidence, test) from the rule document, for production series
    only; a pass share's switch to its corrected bound reads as the judge's own bound (the
    demo has no reviewers)."""
    from prometheus_client import Counter, Histogram

    from demo.rule_evaluation import BREACH, NO_EVIDENCE, NOT_HERE, OK, RuleEvaluator
    from monitor.contract.rulekit.evidence import wilson, window_z
    from monitor.contract.sidecar_registry import SidecarRegistry

    registry = SidecarRegistry()
    latency = Histogram(
        "rag_stage_latency_seconds",
        "",
        ["stage", "variant"],
        buckets=(1, 1.5, 3),
        registry=registry,
    )
    eligible = Counter("rag_filter_eligible_queries_total", "", ["variant"], registry=registry)
    excluded = Counter("rag_filter_false_exclusions_total", "", ["variant"], registry=registry)
    scored = Counter(
        "rag_faithfulness_evaluations_total", "", ["outcome", "variant"], registry=registry
    )
    below = Counter("rag_faithfulness_below_threshold_total", "", ["variant"], registry=registry)
    evaluator = RuleEvaluator(build_rules(Config()), registry)
    short = 'RagFilterFalseExclusionHigh{window="30m"}'
    first = evaluator.evaluate()[1][short]
    assert (first.state, first.op, first.threshold) == (NO_EVIDENCE, ">", 0.02)
    for _ in range(100):
        latency.labels("total", "production").observe(2.5)
        latency.labels("total", "shadow").observe(0.5)
        eligible.labels("production").inc()
    excluded.labels("production").inc(10)
    scored.labels("scored", "production").inc(100)
    below.labels("production").inc(60)
    recorded, readings = evaluator.evaluate()
    faithful = recorded["rag:faithfulness_pass:upper_bound30m"]
    assert faithful == pytest.approx(
        wilson(0.4, 100, window_z(Config().guardrails, "page", ["30m", "6h"])[0][1], "upper")
    )
    faithfulness = readings['RagFaithfulnessLow{window="30m"}']
    assert (faithfulness.state, faithfulness.bound) == (BREACH, faithful)
    assert faithfulness.value == pytest.approx(0.4)
    assert faithfulness.evidence == 100
    assert recorded['rag:stage_latency_seconds:p95_5m{stage="total"}'] == pytest.approx(2.925)
    assert recorded['rag:stage_latency_seconds:slow_ratio_rate1h{stage="total"}'] == 1.0
    bound = recorded["rag:filter_false_exclusions:lower_bound30m"]
    [(_, z), _] = window_z(Config().guardrails, "ticket", ["30m", "6h"])
    assert bound == pytest.approx(wilson(0.1, 100, z, "lower"))
    assert readings['RagStageLatencySLOBreach{stage="total"}'].state == BREACH
    assert readings[short].state == BREACH
    assert readings[short].value == pytest.approx(0.1)
    assert readings[short].bound == bound
    assert readings['RagRegenerationRateAnomalous{window="1h"}'].state == NOT_HERE
    eligible.labels("production").inc(5)  # five labelled queries, none excluded
    again = evaluator.evaluate()[1][short]
    assert (again.state, again.value, again.evidence) == (OK, 0.0, 5)


def test_demo_evaluator_window_reaches_back_to_the_look_window_s_ago() -> None:
    """With a window, the demo's evaluator counts the change since the latest look at
    least window_s old (since the start while none is), not since the last look."""
    from prometheus_client import Counter

    from demo.rule_evaluation import RuleEvaluator
    from monitor.contract.sidecar_registry import SidecarRegistry

    registry = SidecarRegistry()
    eligible = Counter("rag_filter_eligible_queries_total", "", ["variant"], registry=registry)
    Counter("rag_filter_false_exclusions_total", "", ["variant"], registry=registry)
    now = [0.0]
    evaluator = RuleEvaluator(build_rules(Config()), registry, window_s=10, clock=lambda: now[0])
    short = 'RagFilterFalseExclusionHigh{window="30m"}'
    seen = []
    for second in range(0, 25, 5):  # 10 labelled queries before each look
        eligible.labels("production").inc(10)
        now[0] = second
        seen.append(evaluator.evaluate()[1][short].evidence)
    # looks at 0, 5: since the start; from 10 on: since the look 10 s before
    assert seen == [10, 20, 20, 20, 20]


def test_demo_evaluator_reads_alternatives_joined_by_or() -> None:
    """An alert of alternatives joined by ``or`` (RagQueryDriftDetected) is evaluated in
    the demo: met when one alternative's clauses all hold."""
    from prometheus_client import Gauge

    from demo.rule_evaluation import BREACH, OK, RuleEvaluator
    from monitor.contract.sidecar_registry import SidecarRegistry

    registry = SidecarRegistry()
    labels = ["signal"]
    p_value = Gauge("rag_drift_p_value", "", labels, registry=registry)
    detected = Gauge("rag_drift_detected", "", labels, registry=registry)
    evaluator = RuleEvaluator(build_rules(Config()), registry)
    p_value.labels("query").set(0.4)
    detected.labels("query").set(0)
    assert evaluator.evaluate()[1]["RagQueryDriftDetected"].state == OK
    p_value.labels("query").set(0.001)
    detected.labels("query").set(1)
    drift = evaluator.evaluate()[1]["RagQueryDriftDetected"]
    assert (drift.state, drift.value) == (BREACH, 0.001)
