"""Deployment files: the Kubernetes sidecar pod, its config, and the compose stack parse and hold
the fields the product relies on (Docker and a cluster cannot run here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from monitor.config import Config

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kubernetes_objects() -> dict[str, dict[str, Any]]:
    objects = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in documents(path):
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
            objects[doc["kind"]] = doc
    return objects


def test_deployment_runs_rag_monitor_as_a_hardened_sidecar() -> None:
    """The workload has the app and rag-monitor; metrics port named, probes, limits, non-root, read-only root."""
    deployment = kubernetes_objects()["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    containers = {c["name"]: c for c in pod["containers"]}
    assert len(containers) == 2
    sidecar = containers["rag-monitor"]
    assert {"name": "metrics", "containerPort": 9464} in sidecar["ports"]
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {"requests", "limits"} <= sidecar["resources"].keys()
    security = sidecar["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts["state"] == "/var/lib/rag-monitor"
    assert "emptyDir" in volumes["state"] or "persistentVolumeClaim" in volumes["state"]
    assert (
        volumes["config"]["configMap"]["name"]
        == kubernetes_objects()["ConfigMap"]["metadata"]["name"]
    )
    app_env = {e["name"]: e["value"] for e in containers["app"]["env"]}
    assert app_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"


def test_sidecar_gets_its_pod_name_for_kafka_static_membership() -> None:
    """POD_NAME comes from the downward API: the Kafka consumer's static group member id."""
    pod = kubernetes_objects()["Deployment"]["spec"]["template"]["spec"]
    [sidecar] = [c for c in pod["containers"] if c["name"] == "rag-monitor"]
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_configmap_holds_a_valid_rag_monitor_config() -> None:
    """The ConfigMap's monitor.yaml validates, keeps OTLP on localhost and exposes metrics to the pod."""
    config = Config.model_validate(
        yaml.safe_load(kubernetes_objects()["ConfigMap"]["data"]["monitor.yaml"])
    )
    assert config.collectors.otlp.http.host == "127.0.0.1"
    assert config.service.metrics.host == "0.0.0.0"
    assert str(config.service.state_dir) == "/var/lib/rag-monitor"


def test_podmonitor_scrapes_the_metrics_port() -> None:
    """The PodMonitor selects the pods and scrapes the port named metrics."""
    objects = kubernetes_objects()
    monitor = objects["PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_compose_names_the_whole_stack() -> None:
    """compose.yaml has kafka, prometheus, alertmanager, grafana, phoenix and rag-monitor built from the Dockerfile."""
    compose_dir = DEPLOY / "compose"
    compose = yaml.safe_load((compose_dir / "compose.yaml").read_text())
    assert {"kafka", "prometheus", "alertmanager", "grafana", "phoenix", "rag-monitor"} <= compose[
        "services"
    ].keys()
    build = compose["services"]["rag-monitor"]["build"]
    assert (compose_dir / build["context"] / build["dockerfile"]).resolve() == (
        DEPLOY / "Dockerfile"
    ).resolve()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (compose_dir / source).exists(), source
    Config.model_validate(yaml.safe_load((compose_dir / "monitor.yaml").read_text()))


def test_dockerfile_is_multi_stage_non_root_with_cpu_torch() -> None:
    """The image builds in one stage, runs from a slim second stage as a non-root user."""
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2
    assert "torch==2.13.0" in text
    assert "USER 10001" in text


def test_generated_rule_files_are_current() -> None:
    """deploy/ holds `rag-monitor rules` output for the defaults; regenerate it when rules change."""
    from alerts.rules import render_rules

    defaults = Config()
    assert (DEPLOY / "prometheus" / "rules.yaml").read_text() == render_rules(defaults)
    assert (DEPLOY / "kubernetes" / "prometheusrule.yaml").read_text() == render_rules(
        defaults, kubernetes=True
    )
    assert kubernetes_objects()["PrometheusRule"]["spec"]["groups"]


def test_podmonitor_names_the_job_the_rules_expect() -> None:
    """RagMonitorDown matches job="rag-monitor": the PodMonitor relabels the job to that."""
    endpoint = kubernetes_objects()["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    assert {"targetLabel": "job", "replacement": "rag-monitor"} in endpoint["relabelings"]


def test_committed_dashboard_is_current_and_covers_every_guardrail() -> None:
    """deploy/grafana/rag-monitor.json equals `rag-monitor dashboard`; its queries use every guardrail metric."""
    import json

    from alerts.dashboard import panel_queries, render_dashboard

    committed = (DEPLOY / "grafana" / "rag-monitor.json").read_text()
    assert committed == render_dashboard(Config()), (
        "run: rag-monitor dashboard > deploy/grafana/rag-monitor.json"
    )
    dashboard = json.loads(committed)
    queries = " ".join(expr for _, expr in panel_queries(dashboard))
    for metric in (
        "rag_faithfulness_evaluations_total", "rag_faithfulness_score_bucket", "rag_stage_latency_seconds_bucket",
        "rag_stage_latency_window_seconds", "rag_filter_false_exclusions_total", "rag_retrieval_recall_sum",
        "rag_entitlement_violations_total", "rag:regenerations_per_request", "rag_request_cost_usd_sum",
        "rag_cost_usd_total", "rag_drift_p_value", "rag_drift_mmd_statistic", "rag_monitor_records_total",
        "rag_monitor_queue_depth", "rag_monitor_samples_total", "rag_monitor_kafka_lag_records",
    ):  # fmt: skip
        assert metric in queries, metric
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "job", "variant"]
    annotations = {a["name"]: a for a in dashboard["annotations"]["list"]}
    assert set(annotations) == {"Releases", "Embedding model changes"}
    releases = annotations["Releases"]  # on every panel: no panel filter
    assert "filter" not in releases
    assert "rag_release_first_seen_timestamp_seconds" in releases["expr"]
    assert "rag_release_info" in queries
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_kustomization_lists_every_manifest() -> None:
    """`kubectl apply -k deploy/kubernetes` applies every manifest in the folder."""
    folder = DEPLOY / "kubernetes"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    manifests = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
