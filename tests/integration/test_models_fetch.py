"""`rag-monitor models fetch` against a Hugging Face Hub double on loopback.

The double serves what huggingface_hub 0.36's ``snapshot_download`` calls: the
model info of a revision (``/api/models/{repo}/revision/{rev}``) and ``HEAD``/``GET``
``/{repo}/resolve/{rev}/{file}`` with the headers it requires (``X-Repo-Commit``,
``ETag``, ``Content-Length``), and the ``X-Error-Code`` of its 404s. The hub
client reads ``HF_ENDPOINT`` at import, so the command runs as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from prometheus_client import CollectorRegistry
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
from monitor.config import load_config
from tests.conftest import REPO, free_port, make_config, sample, wait_until
from tests.hhem_checkpoint import build_checkpoint, reference_scores
from tests.tiny_bert import save_tiny_bert

pytestmark = pytest.mark.integration

EMBEDDER = "acme/tiny-embedder"
PAIRS = [
    ("The capital of France is Berlin.", "The capital of France is Paris."),
    ("Refunds are possible within 30 days.", "You can get a refund."),
]
INFO = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)")
RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")
Files = dict[str, bytes]


@dataclass
class FakeHub:
    """Repositories at one commit each; every request is recorded."""

    repos: dict[str, tuple[str, Files]]
    requests: list[str] = field(default_factory=list)

    def find(self, repo: str, revision: str) -> tuple[str, Files] | str:
        """The commit and files of ``repo`` at ``revision``, or the hub's X-Error-Code."""
        if repo not in self.repos:
            return "RepoNotFound"
        commit, files = self.repos[repo]
        return (commit, files) if revision in (commit, "main") else "RevisionNotFound"


class _Handler(BaseHTTPRequestHandler):
    server: _HubServer

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, with_body: bool) -> None:
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path)
        hub.requests.append(f"{self.command} {path}")
        route = INFO.fullmatch(path) or RESOLVE.fullmatch(path)
        if route is None:
            return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"}, with_body)
        found = hub.find(route["repo"], route["rev"])
        if isinstance(found, str):
            return self._send(404, b"{}", {"X-Error-Code": found}, with_body)
        commit, files = found
        if route.re is INFO:
            siblings = [{"rfilename": name} for name in sorted(files)]
            info = {"id": route["repo"], "sha": commit, "siblings": siblings}
            return self._send(200, json.dumps(info).encode(), {}, with_body)
        if route["file"] not in files:
            return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, with_body)
        content = files[route["file"]]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(content).hexdigest()}"'}
        return self._send(200, content, headers, with_body)

    def _send(self, status: int, body: bytes, headers: dict[str, str], with_body: bool) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)


class _HubServer(ThreadingHTTPServer):
    hub: FakeHub


@dataclass(frozen=True)
class Published:
    """The repositories' files as published, and the model the HHEM weights came from."""

    hhem: Files
    foundation: Files
    embedder: Files
    local_checkpoint: Path
    model: Any


def _files(directory: Path) -> Files:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    """The tiny HHEM checkpoint as the hub publishes it, its foundation, and an embedder."""
    root = tmp_path_factory.mktemp("published")
    checkpoint, model = build_checkpoint(root)
    hhem = _files(checkpoint)
    config = json.loads(hhem["config.json"])
    hhem["config.json"] = json.dumps({**config, "foundation": DEFAULT_FOUNDATION}).encode()
    hhem["modeling_hhem_v2.py"] = b"# remote code the sidecar never runs\n"
    foundation = _files(root / "flan-t5-foundation")
    foundation["model.safetensors"] = b"foundation weights the scorer never reads"
    (root / "embedder").mkdir()
    embedder = _files(save_tiny_bert(root / "embedder", ["where", "is", "my", "parcel"]))
    embedder["pytorch_model.bin"] = b"a second copy of the weights"
    embedder["onnx/model.onnx"] = b"an export the embedder never reads"
    return Published(hhem, foundation, embedder, checkpoint, model)


@contextmanager
def _serve(repos: dict[str, tuple[str, Files]]) -> Iterator[tuple[FakeHub, str]]:
    server = _HubServer(("127.0.0.1", 0), _Handler)
    server.hub = FakeHub(repos)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.hub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hub(published: Published) -> Iterator[tuple[FakeHub, str]]:
    """The hub double holding every repository at its pinned (or main) commit."""
    repos = {
        HHEM_REPO: (PINNED_REVISIONS[HHEM_REPO], published.hhem),
        DEFAULT_FOUNDATION: (PINNED_REVISIONS[DEFAULT_FOUNDATION], published.foundation),
        EMBEDDER: ("e" * 40, published.embedder),
    }
    with _serve(repos) as served:
        yield served


def fetch(
    endpoint: str,
    tmp_path: Path,
    *args: str,
    limit_file_bytes: int | None = None,
    environ: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``rag-monitor models fetch ARGS`` against ``endpoint``, with a cache under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home")}
    env |= {"HF_HUB_CACHE": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
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
    registry = CollectorRegistry()
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
    with _serve(other) as (_, endpoint):
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
