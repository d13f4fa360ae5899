"""Alert rules: the assembled output against promtool, the golden file, and the contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.rules import build_rules, render_rules, rule_fragments, write_promtool_suite
from monitor.components import DetectorComponent, RuleFragment, load_components
from monitor.config import Config, ConfigError, load_config
from tests.conftest import REPO

ALERTS_DIR = REPO / "alerts"
GOLDEN = ALERTS_DIR / "tests" / "rules.yaml"
REGENERATE = "python -m monitor rules > alerts/tests/rules.yaml"

# README "Alerts": stable names, each with severity and a runbook annotation.
STABLE_ALERTS = {
    "RagFaithfulnessLow",
    "RagStageLatencySLOBreach",
    "RagFilterFalseExclusionHigh",
    "RagRegenerationRateAnomalous",
    "RagCostPerQueryHigh",
    "RagQueryDriftDetected",
    "RagEntitlementViolation",
    "RagMonitorDown",
    "RagMonitorDeadLetters",
    "RagMonitorSheddingSamples",
    "RagMonitorWorkerDown",
    "RagMonitorStateNearFull",
    "RagMonitorTraceTooLarge",
}
DETECTORS = [
    "latency", "release", "cost", "feedback", "faithfulness", "filter_exclusion", "drift", "review",
]  # fmt: skip
WITHOUT_RULES = {"release"}  # its gauge feeds every guardrail alert's suspected_cause


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
    test_files = [str(path) for path in write_promtool_suite(Config(), tmp_path)]
    # one file per detector with rules, one of the sidecar
    assert len(test_files) == len(DETECTORS) - len(WITHOUT_RULES) + 1
    result = subprocess.run(
        [tool("promtool"), "test", "rules", *test_files],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


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
    """The eight detectors are registered by order; their fragments precede the sidecar's own."""
    assert [component.name for component in load_components()] == DETECTORS
    assert [owner for owner, _ in rule_fragments(Config())] == [*DETECTORS, "monitor"]


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
    assert recording["rules"][-1] == {"record": "rag:toy:sum", "expr": "sum(rag_toy_total)"}
    assert [rule["alert"] for rule in alerting["rules"]][-7] == "RagToy"  # before the sidecar's 6


def test_every_design_alert_has_severity_and_annotations() -> None:
    """All stable alert names exist, each with page/ticket severity, summary, description, runbook."""
    alerts = alerts_of(build_rules(Config()))
    assert {rule["alert"] for rule in alerts} == STABLE_ALERTS
    for rule in alerts:
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        annotations = rule["annotations"]
        triaged = not rule["alert"].startswith("RagMonitor")  # the sidecar's own: no cause
        expected = {"summary", "description", "runbook"} | (
            {"suspected_cause"} if triaged else set()
        )
        assert set(annotations) == expected, rule["alert"]
        assert all(annotations.values()), rule["alert"]
        assert annotations["runbook"] == f"README.md#{rule['alert'].lower()}"


def test_entitlement_violation_pages_without_for() -> None:
    """RagEntitlementViolation is a page with `for: 0s`; the guardrails' `for` applies elsewhere."""
    by_name = {rule["alert"]: rule for rule in alerts_of(build_rules(Config()))}
    violation = by_name["RagEntitlementViolation"]
    assert (violation["labels"]["severity"], violation["for"]) == ("page", "0s")
    assert by_name["RagFaithfulnessLow"]["for"] == "10m"


def test_config_sets_thresholds_stages_and_for(tmp_path: Path) -> None:
    """Guardrails from --config: one latency rule per stage with its SLO, thresholds, `for`."""
    text = cli_rules(
        tmp_path,
        "guardrails:\n"
        "  faithfulness_min: 0.9\n"
        "  latency_p95_slo_s: {generate: 0.8, total: 2.5}\n"
        "  cost_per_query_max_usd: 0.05\n"
        "  for: 3m\n",
    )
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in alerts_of(yaml.safe_load(text)):
        rules.setdefault(rule["alert"], []).append(rule)
    latency = rules["RagStageLatencySLOBreach"]
    assert [r["labels"]["slo_seconds"] for r in latency] == ["0.8", "2.5"]
    assert 'p95_5m{stage="generate"} > 0.8' in latency[0]["expr"]
    assert 'p95_5m{stage="total"} > 2.5' in latency[1]["expr"]
    assert "< 0.9" in rules["RagFaithfulnessLow"][0]["expr"]
    assert "> 0.05" in rules["RagCostPerQueryHigh"][0]["expr"]
    assert all(
        r["for"] == "3m"
        for name, rs in rules.items()
        for r in rs
        if name
        not in {"RagEntitlementViolation", "RagMonitorDeadLetters", "RagMonitorTraceTooLarge"}
    )


def test_release_window_sets_the_suspected_cause_query() -> None:
    """guardrails.release_window is the look-back of suspected_cause and of the restart-proof
    first sight (min_over_time), in the annotation of every guardrail alert."""
    config = Config.model_validate({"guardrails": {"release_window": "90m"}})
    for rule in alerts_of(build_rules(config)):
        cause = rule["annotations"].get("suspected_cause")
        if cause is None:
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
            "sample_window",
            "1.5h",
            "guardrails.sample_window: Value error, '1.5h' is not a duration",
        ),
        ("baseline", "week", "guardrails.baseline: Value error, 'week' is not a duration"),
        ("min_events", "0", "guardrails.min_events: Input should be greater than or equal to 1"),
        ("release_window", "6 h", "guardrails.release_window: Value error, '6 h' is not a"),
    ],
    ids=["window", "sample_window", "baseline", "min_events", "release_window"],
)
def test_bad_rule_settings_are_refused(key: str, value: str, problem: str) -> None:
    """Malformed windows or evidence counts are config errors naming the guardrails key."""
    with pytest.raises(ConfigError) as caught:
        load_config(environ={f"RAG_MONITOR_GUARDRAILS__{key.upper()}": value})
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(problem)


def test_window_setting_renames_recordings_consistently() -> None:
    """A 15s window renames the recordings and every alert refers to the renamed ones."""
    text = render_rules(Config.model_validate({"guardrails": {"window": "15s"}}))
    assert "rag:stage_latency_seconds:p95_15s" in text
    assert "p95_5m" not in text
    assert "[5m]" not in text


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
    """monitor.rule_evaluation computes recorded series and alert states from the rule document."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from monitor.rule_evaluation import NO_EVIDENCE, NOT_HERE, RuleEvaluator

    registry = CollectorRegistry()
    latency = Histogram(
        "rag_stage_latency_seconds", "", ["stage"], buckets=(1, 2, 3), registry=registry
    )
    eligible = Counter("rag_filter_eligible_queries_total", "", registry=registry)
    excluded = Counter("rag_filter_false_exclusions_total", "", registry=registry)
    evaluator = RuleEvaluator(build_rules(Config()), registry)
    assert evaluator.evaluate()[1]["RagFilterFalseExclusionHigh"] == NO_EVIDENCE
    for _ in range(100):
        latency.labels("total").observe(2.5)
        eligible.inc()
    excluded.inc(10)
    recorded, states = evaluator.evaluate()
    assert recorded['rag:stage_latency_seconds:p95_5m{stage="total"}'] == pytest.approx(2.95)
    assert states['RagStageLatencySLOBreach{stage="total"}'] == "BREACH (2.95)"
    assert states["RagFilterFalseExclusionHigh"] == "BREACH (0.1)"
    assert states["RagRegenerationRateAnomalous"] == NOT_HERE
    eligible.inc(5)  # five labelled queries, none excluded: healthy but below min_events
    assert evaluator.evaluate()[1]["RagFilterFalseExclusionHigh"] == "ok (0)"
