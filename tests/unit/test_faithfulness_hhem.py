"""HHEM loading without the checkpoint's remote code, and scores equal to HHEM's formula."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from detectors.faithfulness.hhem import (
    FETCH_HINT,
    HhemScorer,
    ModelMissingError,
    load_classifier_weights,
    read_checkpoint,
)
from tests.conftest import REPO
from tests.hhem_checkpoint import Tiny, build_checkpoint, reference_scores

PAIRS = [
    ("The capital of France is Berlin.", "The capital of France is Paris."),
    ("I am in California", "I am in United States."),
    ("A man walks his dog in the park on a sunny day.", "Nobody is outside."),
    ("Refunds are possible within 30 days.\n\nShipping is free.", "Refunds take 30 days."),
    ("Short.", "A much longer hypothesis that pads every other pair in the batch."),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return build_checkpoint(tmp_path_factory.mktemp("hhem"))


@pytest.mark.parametrize("batch_size", [1, 2, 5], ids=["one-at-a-time", "batch-2", "batch-5"])
def test_scores_match_hhem_formula(tiny: Tiny, batch_size: int) -> None:
    """Loaded from the published layout, scores equal predict()'s formula on the same weights."""
    directory, model = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)))
    expected = reference_scores(model, PAIRS)
    assert scorer.score(PAIRS, batch_size=batch_size) == pytest.approx(expected, abs=1e-5)
    assert min(expected) < 0.5 < max(expected)  # the tiny model's scores are spread out


def test_the_shared_embedding_stored_once_is_tied(tiny: Tiny) -> None:
    """The checkpoint stores t5.transformer.shared.weight only; the encoder gets the same."""
    directory, model = tiny
    state = load_classifier_weights(directory / "model.safetensors")
    assert torch.equal(
        state["transformer.encoder.embed_tokens.weight"], state["transformer.shared.weight"]
    )
    scorer = HhemScorer(read_checkpoint(str(directory)))
    loaded: Any = scorer.model
    assert torch.equal(
        loaded.transformer.encoder.embed_tokens.weight, model.transformer.shared.weight
    )


def test_a_hub_id_resolves_from_the_local_cache(tmp_path: Path, tiny: Tiny) -> None:
    """Hub ids for the checkpoint and its foundation are read from a Hugging Face cache."""
    directory, _ = tiny
    cache = tmp_path / "hub"
    config = json.loads((directory / "config.json").read_text())
    for repo, source in (
        ("vectara/hallucination_evaluation_model", directory),
        ("google/flan-t5-base", Path(config["foundation"])),
    ):
        root = cache / f"models--{repo.replace('/', '--')}"
        snapshot = root / "snapshots" / ("0" * 40)
        shutil.copytree(source, snapshot)
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text("0" * 40)
    config["foundation"] = "google/flan-t5-base"
    snapshot_config = (
        cache / "models--vectara--hallucination_evaluation_model/snapshots" / ("0" * 40)
    )
    (snapshot_config / "config.json").write_text(json.dumps(config))
    checkpoint = read_checkpoint("vectara/hallucination_evaluation_model", cache_dir=cache)
    assert checkpoint.directory == snapshot_config
    assert checkpoint.foundation.parent.parent.name == "models--google--flan-t5-base"


@pytest.mark.parametrize(
    "model",
    ["vectara/hallucination_evaluation_model", "/nonexistent/hhem"],
    ids=["hub-id-not-cached", "missing-directory"],
)
def test_a_missing_model_says_how_to_fetch_it_without_loading_torch(
    model: str, tmp_path: Path
) -> None:
    """The error names huggingface-cli download and the config key; torch is never imported."""
    probe = (
        "import sys\n"
        "from detectors.faithfulness.hhem import ModelMissingError, read_checkpoint\n"
        "try:\n"
        f"    read_checkpoint({model!r}, cache_dir={str(tmp_path)!r})\n"
        "except ModelMissingError as exc:\n"
        "    print(exc)\n"
        "print('HEAVY', [m for m in ('torch', 'transformers') if m in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert "huggingface-cli download vectara/hallucination_evaluation_model" in result.stdout
    assert "detectors.faithfulness.model" in result.stdout
    assert "HEAVY []" in result.stdout
    assert "huggingface-cli download google/flan-t5-base" in FETCH_HINT


def test_a_checkpoint_of_another_model_type_is_refused(tmp_path: Path) -> None:
    """A config.json whose model_type is not HHEMv2 is not loaded as HHEM."""
    directory, _ = build_checkpoint(tmp_path, model_type="t5")
    with pytest.raises(ValueError, match="not HHEMv2"):
        read_checkpoint(str(directory))


def test_weights_missing_from_the_directory_are_a_missing_model(tmp_path: Path) -> None:
    """A directory with config.json but no weights file is reported as missing."""
    directory, _ = build_checkpoint(tmp_path)
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelMissingError, match=r"model\.safetensors"):
        read_checkpoint(str(directory))


def test_a_long_premise_is_cut_to_the_budget_and_flagged(
    tiny: Tiny,
) -> None:
    """Over max_premise_tokens the premise keeps its first tokens; the cut is reported."""
    directory, model = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)), max_premise_tokens=40)
    premise = "Refunds are possible within 30 days. " * 10
    prepared = scorer.prepare(premise, "Refunds take 30 days.")
    assert prepared.truncated
    assert not scorer.prepare(premise[:40], "Refunds take 30 days.").truncated
    # ByT5: one token per byte, so the kept premise is the first 40 characters.
    expected = reference_scores(model, [(premise[:40], "Refunds take 30 days.")])
    assert scorer.score_prepared([prepared]) == pytest.approx(expected, abs=1e-5)


def test_bf16_stays_close_to_fp32(tiny: Tiny) -> None:
    """bf16 weights give scores near fp32 (the bench measures the gap at flan-t5-base size)."""
    directory, model = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)), precision="bf16")
    assert next(scorer.model.parameters()).dtype == torch.bfloat16
    assert scorer.score(PAIRS) == pytest.approx(reference_scores(model, PAIRS), abs=0.05)


def test_int8_replaces_every_linear_layer(tiny: Tiny) -> None:
    """int8 swaps each Linear for a dynamically quantized one and still yields probabilities."""
    directory, _ = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)), precision="int8")
    linear = [m for m in scorer.model.modules() if type(m).__name__ == "Linear"]
    assert linear
    assert {type(m).__module__ for m in linear} == {"torch.ao.nn.quantized.dynamic.modules.linear"}
    assert all(0.0 <= s <= 1.0 for s in scorer.score(PAIRS))


def test_no_source_file_asks_for_remote_code() -> None:
    """No module of the product passes trust_remote_code (the checkpoint's code never runs)."""
    flag = "trust_remote" + "_code"
    offenders = [
        str(path.relative_to(REPO))
        for package in ("monitor", "collectors", "detectors", "alerts")
        for path in (REPO / package).rglob("*.py")
        if flag in path.read_text(encoding="utf-8")
    ]
    assert offenders == []
