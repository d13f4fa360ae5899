"""Configuration: the documented example file, defaults, environment overrides, error reporting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from monitor.contract.config import Config
from monitor.runtime.config_loading import ConfigError, explain, load_config

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"


def test_design_example_is_the_default_configuration() -> None:
    """The example YAML (tests/testdata/design_config.yaml, as in the README) validates and equals the built-in defaults."""
    assert load_config(TESTDATA / "design_config.yaml", environ={}) == load_config(environ={})


def test_defaults_need_no_file() -> None:
    """With no file the sidecar listens on loopback 4318/4317/9464 and Kafka is off."""
    config = load_config(environ={})
    assert (config.collectors.otlp.http.host, config.collectors.otlp.http.port) == (
        "127.0.0.1",
        4318,
    )
    assert config.collectors.otlp.grpc.port == 4317
    assert config.service.metrics.port == 9464
    assert config.collectors.kafka.bootstrap_servers is None
    assert config.guardrails.for_ == "10m"


def test_environment_overrides_nested_keys_as_yaml_values() -> None:
    """RAG_MONITOR_<SECTION>__<KEY> sets a nested key; the value is read as YAML."""
    config = load_config(
        environ={
            "RAG_MONITOR_COLLECTORS__KAFKA__BOOTSTRAP_SERVERS": "broker:9092",
            "RAG_MONITOR_DETECTORS__LATENCY__QUANTILES": "[0.5, 0.9]",
            "RAG_MONITOR_COLLECTORS__SPANS__ASSEMBLY__GRACE_S": "0.5",
            "RAG_MONITOR_GUARDRAILS__FOR": "5m",
            "UNRELATED": "1",
        }
    )
    assert config.collectors.kafka.bootstrap_servers == "broker:9092"
    assert config.detectors.latency.quantiles == [0.5, 0.9]
    assert config.collectors.spans.assembly.grace_s == 0.5
    assert config.guardrails.for_ == "5m"


def test_environment_overrides_win_over_the_file(tmp_path: Path) -> None:
    """An environment override replaces the value from the file."""
    path = tmp_path / "c.yaml"
    path.write_text("collectors: {spans: {assembly: {grace_s: 1.0, ttl_s: 30}}}\n")
    config = load_config(path, environ={"RAG_MONITOR_COLLECTORS__SPANS__ASSEMBLY__GRACE_S": "3"})
    assembly = config.collectors.spans.assembly
    assert (assembly.grace_s, assembly.ttl_s) == (3.0, 30.0)


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("service: {metrics: {prot: 1}}", "service.metrics.prot: unknown key"),
        ("collectors: {kafka: {format: xml}}", "collectors.kafka.format"),
        ("detectors: {faithfulness: {sample_rate: 0}}", "detectors.faithfulness.sample_rate"),
        ("detectors: {latency: {quantiles: [1.5]}}", "detectors.latency.quantiles"),
        ("guardrails: {for: soon}", "guardrails.for"),
        (
            "collectors: {spans: {assembly: {max_pending_traces: -1}}}",
            "collectors.spans.assembly.max_pending_traces",
        ),
        ("detectors: {review: {follow_up_patterns: ['(']}}", "detectors.review.follow_up_patterns"),
        (
            "detectors: {faithfulness: {refusal_patterns: ['[a-']}}",
            "detectors.faithfulness.refusal_patterns",
        ),
    ],
    ids=[
        "unknown-key",
        "bad-choice",
        "out-of-range",
        "quantile",
        "duration",
        "negative",
        "bad-pattern",
        "bad-refusal-pattern",
    ],
)
def test_errors_name_the_key_path(tmp_path: Path, yaml_text: str, expected: str) -> None:
    """Each invalid value is reported with its dotted key path."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert any(problem.startswith(expected) for problem in caught.value.problems), caught.value


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    """Several mistakes give several problems, not just the first."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "collectors: {spans: {assembly: {grace_s: -1, ttl_s: 0}}}\nservice: {nope: 1}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert len(caught.value.problems) == 3


def test_unreadable_yaml_is_a_config_error(tmp_path: Path) -> None:
    """Broken YAML and a non-mapping top level are refused with a message."""
    path = tmp_path / "c.yaml"
    path.write_text("service: [unclosed\n")
    with pytest.raises(ConfigError):
        load_config(path, environ={})
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path, environ={})


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """A configuration file with bytes that are not UTF-8 is refused with a message."""
    path = tmp_path / "c.yaml"
    path.write_bytes(b"m\xffapping: {}\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path, environ={})


def test_explain_lists_every_leaf_key_with_a_description() -> None:
    """check-config --explain covers every key and none lacks a description."""
    lines = list(explain())
    assert any(line.startswith("collectors.kafka.dead_letter_topic:") for line in lines)
    assert any(line.startswith("guardrails.for:") for line in lines)
    assert any(line.startswith("collectors.spans.mapping.query_pointers:") for line in lines)
    assert not [line for line in lines if line.endswith("# None")]
    assert Config.model_fields.keys() == {
        "service",
        "collectors",
        "detectors",
        "guardrails",
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_config_cli_reports_errors_and_exit_code(tmp_path: Path) -> None:
    """check-config exits 1 listing each problem, 0 for a valid file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("collectors: {kafka: {format: xml, nope: 1}}\n")
    result = _cli("check-config", str(bad))
    assert result.returncode == 1
    assert "collectors.kafka.format" in result.stderr
    assert "collectors.kafka.nope: unknown key" in result.stderr
    good = _cli("check-config", str(TESTDATA / "design_config.yaml"), "--explain")
    assert good.returncode == 0, good.stderr
    assert "valid" in good.stdout
    assert "detectors.drift.backend" in good.stdout


def _at(document: Any, key: str) -> Any:
    for part in key.split("."):
        document = document[part]
    return document


def test_explain_prints_the_defaults_the_models_have() -> None:
    """Every leaf default printed by --explain equals Config()'s value at that key path."""
    defaults = Config().model_dump(by_alias=True)
    leaves = {}
    for line in explain():
        head = line.rsplit("  # ", 1)[0]
        if not head.endswith(":"):  # "key:" alone heads a section
            key, value = head.split(": ", 1)
            leaves[key] = value
    assert {"guardrails.for", "collectors.kafka.consumer", "detectors.drift.backend"} <= set(leaves)
    assert leaves == {key: repr(_at(defaults, key)) for key in leaves}
    assert leaves["collectors.otlp.http.port"] == "4318"
    assert leaves["collectors.otlp.grpc.port"] == "4317"
    assert leaves["service.metrics.port"] == "9464"


@pytest.mark.parametrize(
    ("yaml_text", "problem"),
    [
        ("service: {tenant_labels: [acme]}", "service.tenant_labels: unknown key"),
        (
            "detectors: {faithfulness: {phoenix: {project: default}}}",
            "detectors.faithfulness.phoenix.project: unknown key",
        ),
    ],
    ids=["tenant_labels", "phoenix-project"],
)
def test_removed_keys_are_unknown(tmp_path: Path, yaml_text: str, problem: str) -> None:
    """Keys that never did anything are refused as unknown, not silently accepted."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.problems == [problem]


@pytest.mark.parametrize(
    ("yaml_text", "problem"),
    [
        ("assembly: {grace_s: 1}", "assembly: moved to collectors.spans.assembly"),
        ("mapping: {doc_id_keys: []}", "mapping: moved to collectors.spans.mapping"),
        (
            "collectors: {otlp: {auth_token_env: TOKEN}}",
            "collectors.otlp.auth_token_env: moved to service.auth_token_env",
        ),
        (
            "collectors: {phoenix: {enabled: true}}",
            "collectors.phoenix: moved to detectors.faithfulness.phoenix",
        ),
        (
            "detectors: {faithfulness: {remote: {floor_window_s: 3600}}}",
            "detectors.faithfulness.remote.floor_window_s: retired: the scorers keep the "
            "floor at an even rate over the hour; detectors.faithfulness.remote.floor_burst_s "
            "bounds what they save",
        ),
    ],
    ids=["assembly", "mapping", "auth_token_env", "phoenix", "floor_window_s"],
)
def test_moved_keys_fail_naming_the_new_key(tmp_path: Path, yaml_text: str, problem: str) -> None:
    """A key that moved (or was retired) is refused at load with its new place (or what
    replaces it), not as an unknown key."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.problems == [f"{problem} (docs: Changes)"]


def test_a_moved_key_set_from_the_environment_names_the_new_key() -> None:
    """RAG_MONITOR_ASSEMBLY__GRACE_S is refused like the file's key, naming the new one."""
    with pytest.raises(ConfigError, match=r"assembly: moved to collectors\.spans\.assembly"):
        load_config(None, environ={"RAG_MONITOR_ASSEMBLY__GRACE_S": "1"})


def test_drift_defaults_to_scipy_and_explain_names_the_alibi_licence() -> None:
    """backend defaults to scipy; --explain tells that alibi-detect is BSL 1.1 (Seldon licence)."""
    assert Config().detectors.drift.backend == "scipy"
    (line,) = [line for line in explain() if line.startswith("detectors.drift.backend:")]
    assert line.startswith("detectors.drift.backend: 'scipy'  # ")
    assert "Business Source License 1.1" in line
    assert "Seldon licence" in line
