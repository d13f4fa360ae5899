"""The sidecar installed without any extra (`pip install rag-monitor` into a fresh venv):
none of the optional libraries is there, the default configuration (HHEM inline) is
refused by check-config as by the start, and in remote judging mode it serves OTLP,
counts the traffic on /metrics and publishes the sampled pairs for the scorers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from tests.conftest import unique, wait_until
from tests.core_install import (
    OPTIONAL_MODULES,
    CoreSidecar,
    core_environment,
    importable,
    install_core,
)
from tests.integration.conftest import Broker, otlp_http_port, requests_for, traces_topic
from tests.otel_traffic import emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

REQUESTS = 20


@pytest.fixture(scope="module")
def core_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a venv holding the core package alone (about 30 s with pip's cache)."""
    return install_core(tmp_path_factory.mktemp("core-install"))


def test_core_install_leaves_out_every_optional_library(core_bin: Path) -> None:
    """torch, transformers, onnx, onnxruntime, alibi-detect, phoenix, pyarrow, matplotlib: none importable."""
    assert importable(core_bin, ("monitor", "kafka", "scipy")) == ["monitor", "kafka", "scipy"]
    assert importable(core_bin, OPTIONAL_MODULES) == []


@pytest.mark.parametrize("verb", ["check-config", "run"])
def test_core_install_refuses_the_inline_hhem_judge(
    core_bin: Path, tmp_path: Path, verb: str
) -> None:
    """The defaults (HHEM inline) exit 1 naming the hhem extra, in check-config as at the start."""
    config = tmp_path / "config.yaml"
    config.write_text(f"service: {{state_dir: {tmp_path / 'state'}}}\n", encoding="utf-8")
    argv = [str(core_bin / "rag-monitor"), verb, *(["--config"] if verb == "run" else [])]
    result = subprocess.run(
        [*argv, str(config)],
        cwd=tmp_path,
        env=core_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert (
        "invalid configuration: detectors.faithfulness (judge: hhem) needs the hhem extra: "
        "pip install 'rag-monitor[hhem]'"
    ) in result.stderr


def test_remote_mode_sidecar_runs_from_the_core_install(
    core_bin: Path, broker: Broker, tmp_path: Path
) -> None:
    """judge_location: kafka: OTLP requests counted on /metrics, sampled pairs published keyed by trace id."""
    requests_topic = broker.create_topic(unique("judge-requests"))
    results_topic = broker.create_topic(unique("judge-results"))
    _, kafka = traces_topic(broker, 1)
    remote = {"requests_topic": requests_topic, "results_topic": results_topic}
    faithfulness = {"judge_location": "kafka", "sample_rate": 1.0, "remote": remote}
    sidecar = CoreSidecar(
        core_bin,
        tmp_path,
        {"collectors": {"kafka": kafka}, "detectors": {"faithfulness": faithfulness}},
    ).start()
    try:
        sidecar.wait_ready()
        endpoint = f"http://127.0.0.1:{otlp_http_port(sidecar)}/v1/traces"
        provider, tracer = tracer_for(OTLPSpanExporter(endpoint=endpoint))
        sent = {emit_rag_request(tracer, request) for request in requests_for(REQUESTS)}
        provider.shutdown()
        wait_until(lambda: sidecar.metric("rag_requests_total") == REQUESTS, timeout=60)
        wait_until(lambda: sidecar.metric("rag_judge_published_total") > 0, timeout=60)
        published = broker.read(requests_topic)
        assert len(published) == sidecar.metric("rag_judge_published_total")
        assert {record.key.decode() for record in published} <= sent
    finally:
        sidecar.stop()
    assert "needs the" not in sidecar.log_path.read_text()
