"""`rag-monitor models fetch` against a Hugging Face Hub double on loopback
(``tests/fake_hub.py``). The hub client reads ``HF_ENDPOINT`` at import, so the command
runs as a subprocess.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from demo.run import warn_missing_models
from detectors.faithfulness.detector import FaithfulnessDetector
from detectors.faithfulness.hhem import (
    DEFAULT_FOUNDATION,
    HHEM_REPO,
    PINNED_REVISIONS,
    HhemScorer,
    read_checkpoint,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.runtime.config_loading import load_config
from tests.conftest import REPO, free_port, make_config, sample, wait_until
from tests.fake_hub import FakeHub, Files, files_of, hub_environ, publish_hhem, serve_hub
from tests.hhem_checkpoint import reference_scores
from tests.tiny_bert import save_tiny_bert

pytestmark = pytest.mark.integration

EMBEDDER = "acme/tiny-embedder"
PAIRS = [
    ("The capital of France is Berlin.", "The capital of France is Paris."),
    ("Refunds are possible within 30 days.", "You can get a refund."),
]


@dataclass(frozen=True)
class Published:
    """The repositories' files as published, and the model the HHEM weights came from."""

    hhem: Files
    foundation: Files
    embedder: Files
    local_checkpoint: Path
    model: Any


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    """The tiny HHEM checkpoint as the hub publishes it, its foundation, and an embedder."""
    root = tmp_path_factory.mktemp("published")
    hhem = publish_hhem(root)
    (root / "embedder").mkdir()
    embedder = files_of(save_tiny_bert(root / "embedder", ["where", "is", "my", "parcel"]))
    embedder["pytorch_model.bin"] = b"a second copy of the weights"
    embedder["onnx/model.onnx"] = b"an export the embedder never reads"
    return Published(hhem.hhem, hhem.foundation, embedder, hhem.local_checkpoint, hhem.model)


@pytest.fixture
def hub(published: Published) -> Iterator[tuple[FakeHub, str]]:
    """The hub double holding every repository at its pinned (or main) commit."""
    repos = {
        HHEM_REPO: (PINNED_REVISIONS[HHEM_REPO], published.hhem),
        DEFAULT_FOUNDATION: (PINNED_REVISIONS[DEFAULT_FOUNDATION], published.foundation),
        EMBEDDER: ("e" * 40, published.embedder),
    }
    with serve_hub(repos) as served:
        yield served


def fetch(
    endpoint: str,
    tmp_path: Path,
    *args: str,
    limit_file_bytes: int | None = None,
    environ: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``rag-monitor models fetch ARGS`` against ``endpoint``, with a cache under ``tmp_path``."""
    env = hub_environ(tmp_path, HF_ENDPOINT=endpoint, PYTHONDONTWRITEBYTECODE="1")
    env |= environ or {}

    def limit_files() -> None:  # a full disk, as the writer sees it: EFBIG past the limit
        if limit_file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "monitor", "models", "fetch", *args],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_files,
    )


def _tree(directory: Path) -> set[str]:
    """Files under ``directory``, without the hub client's own bookkeeping."""
    return {
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and ".cache" not in p.parts
    }


def test_fetch_to_a_directory_lands_verifies_and_prints_working_settings(
    published: Published, hub: tuple[FakeHub, str], tmp_path: Path
) -> None:
    """--to DIR: only the files the detectors read land there, each is loaded, and the
    printed settings start the faithfulness detector and the embedder from DIR."""
    _, endpoint = hub
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"detectors": {"drift": {"embedder": EMBEDDER}}}))
    to = tmp_path / "models"
    result = fetch(endpoint, tmp_path, "--config", str(config), "--to", str(to))
    assert result.returncode == 0, result.stderr
    checkpoint, foundation = to / HHEM_REPO, to / HHEM_REPO / DEFAULT_FOUNDATION
    foundation_files = set(published.foundation) - {"model.safetensors"}
    embedder_files = set(published.embedder) - {"pytorch_model.bin", "onnx/model.onnx"}
    assert _tree(to) == {
        *(f"{HHEM_REPO}/{name}" for name in ("config.json", "model.safetensors")),
        *(f"{HHEM_REPO}/{DEFAULT_FOUNDATION}/{name}" for name in foundation_files),
        *(f"{EMBEDDER}/{name}" for name in embedder_files),
    }
    assert (checkpoint / "model.safetensors").read_bytes() == published.hhem["model.safetensors"]
    assert "verified detectors.faithfulness" in result.stderr
    assert "verified detectors.drift" in result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed == {
        "detectors": {
            "faithfulness": {"model": str(checkpoint)},
            "drift": {"embedder": str(to / EMBEDDER)},
        }
    }
    (tmp_path / "printed.yaml").write_text(result.stdout)
    settings = load_config(tmp_path / "printed.yaml").detectors
    assert read_checkpoint(settings.faithfulness.model).foundation == foundation
    scorer = HhemScorer(read_checkpoint(settings.faithfulness.model))
    expected = reference_scores(published.model, PAIRS)
    assert scorer.score(PAIRS) == pytest.approx(expected, abs=1e-5)
    registry = SidecarRegistry()
    detector = FaithfulnessDetector(settings.faithfulness, registry)
    detector.start()
    try:
        # precision auto (the default) measures its candidates before it is ready
        wait_until(lambda: detector.worker.state != "loading", timeout=180)
        assert detector.worker.state == "ready"
        assert sample(registry, "rag_monitor_detector_up", detector="faithfulness") == 1
    finally:
        detector.shutdown()
    from detectors.drift.embedder import QueryEmbedder

    assert QueryEmbedder(settings.drift.embedder).embed(["where is my parcel"]).shape == (1, 16)


def test_fetch_into_the_cache_is_read_by_the_sidecar_without_the_hub(
    hub: tuple[FakeHub, str], tmp_path: Path, sidecar_process: Any, monkeypatch: Any
) -> None:
    """Default: the pinned commits land in the cache; a sidecar started with the printed
    setting loads HHEM from it and sends the hub no request (HF_HUB_OFFLINE unset)."""
    fake, endpoint = hub
    result = fetch(endpoint, tmp_path)
    assert result.returncode == 0, result.stderr
    cache = tmp_path / "cache"
    for repo, name in ((HHEM_REPO, "model.safetensors"), (DEFAULT_FOUNDATION, "config.json")):
        folder = cache / f"models--{repo.replace('/', '--')}"
        assert (folder / "snapshots" / PINNED_REVISIONS[repo] / name).is_file()
    printed = yaml.safe_load(result.stdout)
    assert printed == {"detectors": {"faithfulness": {"model": HHEM_REPO}}}
    before = len(fake.requests)
    for name in [k for k in os.environ if k.startswith(("HF_", "HUGGINGFACE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    sidecar = sidecar_process(printed).start()
    sidecar.wait_ready()
    wait_until(
        lambda: sidecar.metric("rag_monitor_detector_up", detector="faithfulness") == 1,
        timeout=180,
        every=0.5,
    )
    assert sidecar.stop() == 0
    assert fake.requests[before:] == []
    assert "faithfulness_model_missing" not in sidecar.log_path.read_text()


def test_a_revision_the_hub_does_not_have_is_one_clear_line(
    published: Published, tmp_path: Path
) -> None:
    """The hub holds HHEM at another commit: exit 1, the pin named, no traceback, no files."""
    other = {
        HHEM_REPO: ("1" * 40, published.hhem),
        DEFAULT_FOUNDATION: (PINNED_REVISIONS[DEFAULT_FOUNDATION], published.foundation),
    }
    to = tmp_path / "models"
    with serve_hub(other) as (_, endpoint):
        result = fetch(endpoint, tmp_path, "--to", str(to))
    assert result.returncode == 1
    assert f"has no revision {PINNED_REVISIONS[HHEM_REPO]} of {HHEM_REPO}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not to.exists() or _tree(to) == set()


def test_an_unreachable_hub_is_one_clear_line(tmp_path: Path) -> None:
    """Nothing listens at HF_ENDPOINT: exit 1, 'cannot reach' with the reason, no traceback."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = fetch(endpoint, tmp_path)
    assert result.returncode == 1
    assert f"cannot reach {endpoint} (Connection refused)" in result.stderr
    assert "Traceback" not in result.stderr


def test_hf_hub_offline_is_named_instead_of_a_network_error(
    hub: tuple[FakeHub, str], tmp_path: Path
) -> None:
    """HF_HUB_OFFLINE=1 (as the sidecar runs) makes the command say to unset it; exit 1."""
    fake, endpoint = hub
    result = fetch(endpoint, tmp_path, environ={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "HF_HUB_OFFLINE is set: unset it for this command" in result.stderr
    assert "Traceback" not in result.stderr
    assert fake.requests == []


def test_a_full_disk_is_one_clear_line(hub: tuple[FakeHub, str], tmp_path: Path) -> None:
    """Writes fail past 64 KiB (the HHEM weights are larger): exit 1, where and why."""
    _, endpoint = hub
    to = tmp_path / "models"
    result = fetch(endpoint, tmp_path, "--to", str(to), limit_file_bytes=64 * 1024)
    assert result.returncode == 1
    assert f"cannot write under {to}: File too large" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("present", [True, False], ids=["model-present", "model-missing"])
def test_the_demo_names_the_fetch_command_when_the_model_is_missing(
    published: Published, tmp_path: Path, present: bool
) -> None:
    """Without the model the demo logs which command fetches it; with it, nothing."""
    model = str(published.local_checkpoint if present else tmp_path / "no-model-here")
    config = make_config(detectors={"faithfulness": {"model": model}})
    with capture_logs() as logs:
        missing = warn_missing_models(config)
    lines = [entry for entry in logs if entry["event"] == "demo_model_missing"]
    if present:
        assert (missing, lines) == ([], [])
        return
    assert missing == [f"faithfulness needs {model}"]
    assert len(lines) == 1
    assert lines[0]["detector"] == "faithfulness"
    assert "`rag-monitor models fetch`" in lines[0]["how_to_fix"]


def test_the_demo_names_a_hub_embedder_that_is_not_cached(published: Published) -> None:
    """A drift embedder hub id with no cached copy is reported like the HHEM model."""
    config = make_config(
        detectors={
            "faithfulness": {"model": str(published.local_checkpoint)},
            "drift": {"embedder": "acme/never-fetched-encoder"},
        }
    )
    with capture_logs() as logs:
        missing = warn_missing_models(config)
    assert missing == ["drift needs acme/never-fetched-encoder"]
    assert [entry["detector"] for entry in logs if entry["event"] == "demo_model_missing"] == [
        "drift"
    ]
