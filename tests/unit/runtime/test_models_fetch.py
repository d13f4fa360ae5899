"""`rag-monitor models fetch` without a hub: the plan from the config, the refusals that
need no network, and how the sidecar finds a fetched copy in the cache."""

from __future__ import annotations

import io
import socket
import time
from pathlib import Path

import pytest

from detectors.faithfulness.hhem import HHEM_REPO, PINNED_REVISIONS, resolve_model_dir
from monitor.runtime.models import fetch_models, hub_unreachable
from tests.conftest import make_config

OTHER_COMMIT = "0" * 40


def _snapshot(cache: Path, repo: str, commit: str) -> Path:
    """A cached snapshot of ``repo`` at ``commit``, laid out as huggingface_hub writes it."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    return snapshot


def _point_main(cache: Path, repo: str, commit: str) -> None:
    refs = cache / f"models--{repo.replace('/', '--')}" / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(commit)


def test_the_cache_is_read_at_the_pinned_commit_before_main(tmp_path: Path) -> None:
    """A fetched (pinned, no main ref) snapshot wins over another commit that main points to."""
    pinned = _snapshot(tmp_path, HHEM_REPO, PINNED_REVISIONS[HHEM_REPO])
    _snapshot(tmp_path, HHEM_REPO, OTHER_COMMIT)
    _point_main(tmp_path, HHEM_REPO, OTHER_COMMIT)
    assert resolve_model_dir(HHEM_REPO, tmp_path) == pinned


def test_a_cache_filled_by_hand_at_main_is_still_read(tmp_path: Path) -> None:
    """Without the pinned commit, the snapshot main points to (huggingface-cli download)."""
    other = _snapshot(tmp_path, HHEM_REPO, OTHER_COMMIT)
    _point_main(tmp_path, HHEM_REPO, OTHER_COMMIT)
    assert resolve_model_dir(HHEM_REPO, tmp_path) == other


@pytest.mark.parametrize("off", [True, False], ids=["faithfulness-off", "model-is-a-directory"])
def test_nothing_to_fetch_when_no_detector_reads_the_hub(off: bool, tmp_path: Path) -> None:
    """No hub id to read (drift has no embedder by default): exit 0, said on stderr, no YAML."""
    section = {"enabled": False} if off else {"model": str(tmp_path)}
    out, err = io.StringIO(), io.StringIO()
    assert fetch_models(make_config(detectors={"faithfulness": section}), None, out, err) == 0
    assert out.getvalue() == ""
    assert "reads a model from the hub" in err.getvalue()


@pytest.mark.parametrize(
    ("detectors", "message"),
    [
        (
            {"faithfulness": {"model": "/models/hhem-not-there"}},
            "detectors.faithfulness.model: '/models/hhem-not-there' is neither",
        ),
        (
            {"faithfulness": {"enabled": False}, "drift": {"embedder": "./encoder-not-there"}},
            "detectors.drift.embedder: './encoder-not-there' is neither",
        ),
    ],
    ids=["faithfulness-path", "embedder-path"],
)
def test_a_setting_that_names_no_hub_id_is_refused_before_any_download(
    detectors: dict[str, dict[str, object]], message: str
) -> None:
    """A missing local path cannot be fetched: exit 1 with the key, before the network."""
    out, err = io.StringIO(), io.StringIO()
    assert fetch_models(make_config(detectors=detectors), None, out, err) == 1
    assert message in err.getvalue()
    assert out.getvalue() == ""


def test_a_hub_that_never_answers_is_given_up_on_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_ENDPOINT accepts connections and never answers (a stuck proxy, a black hole): the
    demo's reachability check says so within its timeout rather than hang its start."""
    from huggingface_hub import constants

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever reads or answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        started = time.monotonic()
        why = hub_unreachable(timeout_s=0.5)
        waited = time.monotonic() - started
    assert why is not None
    assert why.startswith(f"cannot reach {endpoint} (")
    assert waited < 2.0


def test_hf_hub_offline_is_a_reason_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE set: the check answers at once, and asks no endpoint (none is valid)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://invalid.invalid")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_unreachable() == "HF_HUB_OFFLINE is set"
