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


MIXED_LENGTHS = [
    ("Short.", "Yes."),
    ("Refunds are possible within 30 days. " * 6, "Refunds take 30 days."),
    ("The museum opens at nine.", "It opens at nine."),
    ("Shipping is free above 50 euros. " * 3, "Shipping costs 5 dollars."),
    ("A", "B"),
    ("The bridge was completed in 1932 after six years. " * 4, "It took six years."),
    ("Tickets for children are free.", "Children pay."),
]


def test_batched_scores_come_back_in_input_order_equal_to_one_at_a_time(tiny: Tiny) -> None:
    """The length-sorted micro-batches (the cuda path, run here on the CPU) give each pair the
    score it gets alone, in the order the pairs were given."""
    directory, _ = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)))
    alone = [scorer.score([pair])[0] for pair in MIXED_LENGTHS]
    assert scorer.score(MIXED_LENGTHS, batch_size=3) == pytest.approx(alone, abs=1e-5)
    assert len(set(alone)) == len(alone)  # distinct scores: a misplaced one would show


def test_micro_batches_are_length_sorted_and_padded_to_their_own_longest(tiny: Tiny) -> None:
    """Each forward pass takes at most batch_size pairs, shortest first, padded only to the
    longest pair in that micro-batch."""
    directory, _ = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)))
    prepared = [scorer.prepare(p, h) for p, h in MIXED_LENGTHS]
    passes: list[tuple[int, list[int]]] = []  # (padded width, real lengths)

    def record(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        passes.append((ids.shape[1], [int(n) for n in mask.sum(dim=1)]))

    handle = scorer.model.transformer.register_forward_pre_hook(record, with_kwargs=True)  # type: ignore[union-attr, operator]
    try:
        scorer.score_batched(prepared, batch_size=3)
    finally:
        handle.remove()
    lengths = [length for _, batch in passes for length in batch]
    assert lengths == sorted(len(p.input_ids) for p in prepared)
    assert all(len(batch) <= 3 for _, batch in passes)
    assert all(width == max(batch) for width, batch in passes)
    assert len(passes) > 1


def test_bf16_autocast_keeps_layer_norms_and_the_classifier_in_fp32(tiny: Tiny) -> None:
    """bf16_autocast: weights stay fp32, Linear layers compute in bf16, the layer norms and
    the classifier in fp32; scores stay near fp32's."""
    directory, model = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)), precision="bf16_autocast")
    assert {p.dtype for p in scorer.model.parameters()} == {torch.float32}
    seen: dict[str, torch.dtype] = {}
    modules: Any = scorer.model
    layer = modules.transformer.encoder.block[0].layer[0]
    watched = {
        "attention_linear": layer.SelfAttention.q,
        "layer_norm": layer.layer_norm,
        "final_layer_norm": modules.transformer.encoder.final_layer_norm,
        "classifier": modules.classifier,
    }
    handles = [
        module.register_forward_hook(
            lambda _m, args, out, name=name: seen.update(
                {name: out.dtype, f"{name}_in": args[0].dtype}
            )
        )
        for name, module in watched.items()
    ]
    try:
        scores = scorer.score(PAIRS)
    finally:
        for handle in handles:
            handle.remove()
    assert seen["attention_linear"] == torch.bfloat16
    assert seen["layer_norm"] == seen["final_layer_norm"] == torch.float32
    assert seen["classifier_in"] == seen["classifier"] == torch.float32
    # The tiny random model magnifies rounding (its logits are spread on purpose); the
    # bench measures the change at flan-t5-base size.
    assert scores == pytest.approx(reference_scores(model, PAIRS), abs=0.1)


def test_converted_shares_the_tokenizer_and_leaves_fp32_untouched(tiny: Tiny) -> None:
    """Converting to bf16 or int8 works on a copy: the fp32 scorer's scores do not change."""
    directory, _ = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)))
    before = scorer.score(PAIRS)
    for precision in ("bf16_autocast", "bf16", "int8", "onnx"):
        other = scorer.converted(precision)  # type: ignore[arg-type]
        assert other.precision == precision
        assert other.tokenizer is scorer.tokenizer
        other.score(PAIRS)
    assert scorer.score(PAIRS) == before
    assert {p.dtype for p in scorer.model.parameters()} == {torch.float32}


def test_onnx_runtime_scores_equal_the_hhem_formula_at_every_length(tiny: Tiny) -> None:
    """precision onnx: the encoder exported once runs every micro-batch shape in ONNX
    Runtime, with fp32's scores to rounding, in the order given."""
    directory, model = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)), precision="onnx")
    expected = reference_scores(model, MIXED_LENGTHS)
    assert scorer.score(MIXED_LENGTHS, batch_size=3) == pytest.approx(expected, abs=1e-5)
    assert scorer.score(PAIRS) == pytest.approx(reference_scores(model, PAIRS), abs=1e-5)
