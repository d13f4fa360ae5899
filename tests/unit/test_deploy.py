"""Deployment files: the Kubernetes sidecar pod, its config, and the compose stack parse and hold
the fields the product relies on (Docker and a cluster cannot run here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from monitor.contract.config import Config

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kubernetes_objects(
    folder: Path = DEPLOY / "kubernetes",
) -> dict[tuple[str, str], dict[str, Any]]:
    """The manifests of ``folder`` by (kind, name); a name appears once per kind."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in documents(path):
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, key
            objects[key] = doc
    return objects


SIDECAR = ("Deployment", "rag-service")
SIDECAR_CONFIG = ("ConfigMap", "rag-monitor-config")
SIDECAR_MONITOR = ("PodMonitor", "rag-monitor")
SCORER = ("Deployment", "rag-monitor-scorer")
SCORER_CONFIG = ("ConfigMap", "rag-monitor-scorer-config")
SCORER_MONITOR = ("PodMonitor", "rag-monitor-scorer")
GPU_SCORER = ("Deployment", "rag-monitor-scorer-gpu")
GPU_SCORER_CONFIG = ("ConfigMap", "rag-monitor-scorer-gpu-config")


def test_deployment_runs_rag_monitor_as_a_hardened_sidecar() -> None:
    """The workload has the app and rag-monitor; metrics port named, probes, limits, non-root, read-only root."""
    deployment = kubernetes_objects()[SIDECAR]
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
    assert volumes["config"]["configMap"]["name"] == SIDECAR_CONFIG[1]
    app_env = {e["name"]: e["value"] for e in containers["app"]["env"]}
    assert app_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"


def test_sidecar_gets_its_pod_name_for_kafka_static_membership() -> None:
    """POD_NAME comes from the downward API: the Kafka consumer's static group member id."""
    pod = kubernetes_objects()[SIDECAR]["spec"]["template"]["spec"]
    [sidecar] = [c for c in pod["containers"] if c["name"] == "rag-monitor"]
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_configmap_holds_a_valid_rag_monitor_config() -> None:
    """The ConfigMap's monitor.yaml validates, keeps OTLP on localhost and exposes metrics to the pod."""
    config = Config.model_validate(
        yaml.safe_load(kubernetes_objects()[SIDECAR_CONFIG]["data"]["monitor.yaml"])
    )
    assert config.collectors.otlp.http.host == "127.0.0.1"
    assert config.service.metrics.host == "0.0.0.0"
    assert str(config.service.state_dir) == "/var/lib/rag-monitor"
    # The slim sidecar image judges nothing itself: the scorers do.
    assert config.detectors.faithfulness.judge_location == "kafka"


def test_podmonitor_scrapes_the_metrics_port() -> None:
    """The PodMonitor selects the pods and scrapes the port named metrics."""
    objects = kubernetes_objects()
    monitor = objects[SIDECAR_MONITOR]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = objects[SIDECAR]["spec"]["template"]["metadata"]["labels"]
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


def test_compose_remote_layout_runs_slim_sidecar_and_scorers() -> None:
    """remote.yaml turns the compose stack into the remote layout: the sidecar in the core image
    with judge_location kafka, scorers built from the scorer target running `score` on the same
    valid config, and Prometheus scraping them under the sidecar's job."""
    compose_dir = DEPLOY / "compose"
    remote = yaml.safe_load((compose_dir / "remote.yaml").read_text())["services"]
    assert remote["rag-monitor"]["build"]["args"] == {"EXTRAS": ""}
    scorer = remote["scorer"]
    assert scorer["build"]["target"] == "scorer"
    assert scorer["command"][:1] == ["score"]
    [mount] = scorer["volumes"]
    source, target = mount.split(":")[:2]
    assert remote["rag-monitor"]["volumes"] == [mount]  # the same file, at the same target
    assert target == "/etc/rag-monitor/monitor.yaml"
    config = Config.model_validate(yaml.safe_load((compose_dir / source).read_text()))
    assert config.detectors.faithfulness.judge_location == "kafka"
    assert config.collectors.kafka.bootstrap_servers
    scrape = yaml.safe_load((compose_dir / "prometheus.yml").read_text())["scrape_configs"]
    [job] = [job for job in scrape if job["job_name"] == config.guardrails.job]
    assert job["dns_sd_configs"][0]["names"] == ["scorer"]


def _stages(text: str) -> dict[str, str]:
    """The Dockerfile's stages by name: the lines from each `FROM ... AS name` to the next."""
    parts = re.split(r"^FROM \S+ AS (\S+)\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_dockerfile_builds_a_slim_sidecar_and_a_scorer() -> None:
    """Targets sidecar (the default, core only) and scorer (core + hhem, pinned torch first), non-root."""
    text = (DEPLOY / "Dockerfile").read_text()
    stages = _stages(text)
    assert list(stages)[-1] == "sidecar"  # a plain `docker build` gives the slim sidecar
    assert 'ARG EXTRAS=""' in stages["sidecar-build"]
    assert '".${EXTRAS:+[$EXTRAS]}"' in stages["sidecar-build"]
    scorer_build = stages["scorer-build"]
    assert scorer_build.index("torch==2.13.0") < scorer_build.index("'.[hhem]'")
    assert "COPY --from=scorer-build" in stages["scorer"]
    assert "COPY --from=sidecar-build" in stages["sidecar"]
    assert 'CMD ["score", "--config", "/etc/rag-monitor/monitor.yaml"]' in stages["scorer"]
    assert 'CMD ["run", "--config", "/etc/rag-monitor/monitor.yaml"]' in stages["sidecar"]
    for target in ("sidecar", "scorer"):
        assert "USER 10001" in stages[target], target


def test_dockerfile_copies_every_package() -> None:
    """The image installs what pyproject packages: every top-level package it finds is copied."""
    import tomllib

    root = DEPLOY.parent
    with (root / "pyproject.toml").open("rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    copied = set(
        re.findall(r"^COPY (\w+) \./\1$", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    )
    assert copied == packages


def test_compose_builds_the_extras_its_config_enables() -> None:
    """The compose sidecar judges inline with Phoenix annotations: its image carries hhem and phoenix."""
    compose_dir = DEPLOY / "compose"
    build = yaml.safe_load((compose_dir / "compose.yaml").read_text())["services"]["rag-monitor"][
        "build"
    ]
    config = Config.model_validate(yaml.safe_load((compose_dir / "monitor.yaml").read_text()))
    extras = set(build["args"]["EXTRAS"].split(","))
    assert build["target"] == "sidecar"
    faithfulness = config.detectors.faithfulness
    assert (faithfulness.judge_location == "inline" and faithfulness.judge == "hhem") == (
        "hhem" in extras
    )
    phoenix = config.detectors.faithfulness.phoenix
    assert (phoenix.enabled and phoenix.annotate) == ("phoenix" in extras)


def _config(configmap: dict[str, Any]) -> Config:
    return Config.model_validate(yaml.safe_load(configmap["data"]["monitor.yaml"]))


def _scorers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Deployment, its ConfigMap) of the CPU scorer and of the GPU alternative."""
    base = kubernetes_objects()
    alternatives = kubernetes_objects(DEPLOY / "kubernetes" / "alternatives")
    return [
        (base[SCORER], base[SCORER_CONFIG]),
        (alternatives[GPU_SCORER], alternatives[GPU_SCORER_CONFIG]),
    ]


def test_scorer_deployments_run_rag_monitor_score() -> None:
    """CPU and GPU scorers: `rag-monitor score` on their ConfigMap (remote HHEM), metrics port, probes, hardened."""
    for deployment, configmap in _scorers():
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        assert (
            deployment["spec"]["selector"]["matchLabels"].items()
            <= template["metadata"]["labels"].items()
        )
        [scorer] = template["spec"]["containers"]
        assert scorer["command"] + scorer["args"] == [
            "rag-monitor", "score", "--config", "/etc/rag-monitor/monitor.yaml"
        ]  # fmt: skip
        assert {"name": "metrics", "containerPort": 9464} in scorer["ports"]
        assert scorer["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert scorer["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert scorer["securityContext"]["readOnlyRootFilesystem"] is True
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == configmap["metadata"]["name"], name
        mounts = {m["name"]: m["mountPath"] for m in scorer["volumeMounts"]}
        config = _config(configmap)
        faithfulness = config.detectors.faithfulness
        assert (faithfulness.judge_location, faithfulness.judge) == ("kafka", "hhem"), name
        assert faithfulness.model.startswith(mounts["models"] + "/"), name
        assert config.service.metrics.port == 9464


def test_gpu_scorer_asks_for_a_gpu_on_gpu_nodes() -> None:
    """The GPU variant requests nvidia.com/gpu, selects GPU nodes and judges on cuda."""
    (_, _), (deployment, configmap) = _scorers()
    pod = deployment["spec"]["template"]["spec"]
    [scorer] = pod["containers"]
    assert scorer["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"]
    assert _config(configmap).detectors.faithfulness.device == "cuda"


def test_deployments_select_only_their_own_pods() -> None:
    """No Deployment's selector matches another's pods (CPU and GPU scorers share a name label)."""
    deployments = [kubernetes_objects()[SIDECAR]] + [deployment for deployment, _ in _scorers()]
    for one in deployments:
        for other in deployments:
            if one is not other:
                selector = one["spec"]["selector"]["matchLabels"].items()
                assert not selector <= other["spec"]["template"]["metadata"]["labels"].items()


def test_sidecars_and_scorers_agree_on_kafka() -> None:
    """The sidecar ConfigMap and each scorer's name the same broker and topics."""
    sidecar = _config(kubernetes_objects()[SIDECAR_CONFIG])
    for _, configmap in _scorers():
        scorer = _config(configmap)
        assert (
            scorer.collectors.kafka.bootstrap_servers == sidecar.collectors.kafka.bootstrap_servers
        )
        assert scorer.detectors.faithfulness.remote == sidecar.detectors.faithfulness.remote


def test_autoscalers_follow_the_scorer_groups_lag() -> None:
    """KEDA's kafka trigger and the HPA alternative watch the scorers' group on the requests topic, alike."""
    objects = kubernetes_objects()
    remote = _config(objects[SCORER_CONFIG]).detectors.faithfulness.remote
    scaled = objects[("ScaledObject", "rag-monitor-scorer")]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == SCORER[1]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    metadata = trigger["metadata"]
    assert metadata["consumerGroup"] == remote.group_id
    assert metadata["topic"] == remote.requests_topic
    assert (
        metadata["bootstrapServers"]
        == _config(objects[SCORER_CONFIG]).collectors.kafka.bootstrap_servers
    )
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    hpa = kubernetes_objects(DEPLOY / "kubernetes" / "alternatives")[
        ("HorizontalPodAutoscaler", "rag-monitor-scorer")
    ]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": SCORER[1],
    }
    [metric] = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["selector"]["matchLabels"] == {
        "consumergroup": remote.group_id, "topic": remote.requests_topic
    }  # fmt: skip
    assert metric["external"]["target"]["averageValue"] == metadata["lagThreshold"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (
        scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]
    )  # fmt: skip


def test_podmonitors_scrape_both_roles_as_one_job() -> None:
    """Sidecars and scorers (CPU and GPU) are scraped on port metrics as job rag-monitor, role apart."""
    objects = kubernetes_objects()
    scorers = [deployment for deployment, _ in _scorers()]
    for key, deployments, role in (
        (SIDECAR_MONITOR, [objects[SIDECAR]], "sidecar"),
        (SCORER_MONITOR, scorers, "scorer"),
    ):
        monitor = objects[key]
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == "metrics"
        assert {"targetLabel": "job", "replacement": "rag-monitor"} in endpoint["relabelings"]
        assert {"targetLabel": "role", "replacement": role} in endpoint["relabelings"]
        for deployment in deployments:
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_generated_rule_files_are_current() -> None:
    """deploy/ holds `rag-monitor rules` output for the defaults; regenerate it when rules change."""
    from alerts.rules import render_rules

    defaults = Config()
    assert (DEPLOY / "prometheus" / "rules.yaml").read_text() == render_rules(defaults)
    assert (DEPLOY / "kubernetes" / "prometheusrule.yaml").read_text() == render_rules(
        defaults, kubernetes=True
    )
    [rule] = [o for (kind, _), o in kubernetes_objects().items() if kind == "PrometheusRule"]
    assert rule["spec"]["groups"]


def test_podmonitor_names_the_job_the_rules_expect() -> None:
    """RagMonitorDown matches job="rag-monitor": the PodMonitor relabels the job to that."""
    endpoint = kubernetes_objects()[SIDECAR_MONITOR]["spec"]["podMetricsEndpoints"][0]
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
    assert set(annotations) == {"Releases", "Embedding model changes", "Judge changes"}
    assert "rag_faithfulness_judge_info" in annotations["Judge changes"]["expr"]
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
