"""The token_classifier judge: its model input and spans equal lettucedetect's on the same
checkpoint, its score and spans agree at every threshold, and it caches, chunks, runs in
each CPU precision, reports a missing model and keeps text out of the logs.

The reference is lettucedetect 0.2.3's TransformerDetector, recorded on the checkpoint
``tests/token_checkpoint.py`` builds (it cannot be installed beside this project: see
``tests/testdata/token_judge/record_reference.py``, which wrote the fixture).
"""

from __future__ import annotations

import copy
import io
import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from detectors.faithfulness import component
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import ModelMissingError
from detectors.faithfulness.judge_choice import open_judge
from detectors.faithfulness.judge_contract import JudgePair, JudgeResult, WorkerStats
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.token_classifier import (
    DEFAULT_TOKEN_MODEL,
    TokenClassifier,
    TokenPrecision,
    resolve_token_model,
)
from detectors.faithfulness.token_judge import TokenJudge, load_token_judge, verdict
from monitor.contract.sidecar_registry import SidecarRegistry
from tests.conftest import REPO
from tests.token_checkpoint import build_checkpoint

REFERENCE = json.loads(
    (REPO / "tests/testdata/token_judge/lettucedetect_reference.json").read_text("utf-8")
)
CASES: list[dict[str, Any]] = REFERENCE["cases"]
Classifiers = Callable[..., TokenClassifier]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread: a model this small gains nothing from more, and on a busy machine
    spinning threads slow every call down."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("token") / "ckpt", seed=REFERENCE["seed"])


@pytest.fixture(scope="module")
def classifiers(checkpoint: Path) -> Classifiers:
    """One loaded classifier per (max_length, precision), shared by the module's tests."""
    loaded: dict[tuple[int, str], TokenClassifier] = {}

    def get(max_length: int = 512, precision: TokenPrecision = "fp32") -> TokenClassifier:
        if (512, precision) not in loaded:
            loaded[512, precision] = TokenClassifier(
                checkpoint, precision=precision, max_length=512
            )
        if (max_length, precision) not in loaded:
            # The same weights at another length: max_length is read at each encode.
            shorter = copy.copy(loaded[512, precision])
            shorter.max_length = max_length
            loaded[max_length, precision] = shorter
        return loaded[max_length, precision]

    return get


def pair_of(case: dict[str, Any]) -> JudgePair:
    """The pair as the worker builds it: the contexts joined by a blank line."""
    return JudgePair("\n\n".join(case["contexts"]), case["answer"], case["question"])


def merged(spans: list[list[int]]) -> tuple[tuple[int, int], ...]:
    """lettucedetect's spans with touching or overlapping ones joined, as ours are."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def by_name(case: dict[str, Any]) -> str:
    return str(case["name"])


def test_the_fixture_covers_chunking() -> None:
    """The recorded cases include evidence split over several inputs, one of them holding
    two passages, and answers with spans and without flagged tokens in places."""
    chunked = [c for c in CASES if len(c["chunks"]) > 1]
    assert len(chunked) >= 2
    assert any(len(c["chunks"]) < len(c["contexts"]) for c in chunked)
    assert all(c["spans"] for c in CASES)
    assert REFERENCE["versions"]["lettucedetect"] == "0.2.3"


@pytest.mark.parametrize("case", CASES, ids=by_name)
def test_model_input_equals_lettucedetect(case: dict[str, Any], classifiers: Classifiers) -> None:
    """Same chunks, same token ids, same answer tokens and character offsets."""
    pair = pair_of(case)
    encoded = classifiers(case["max_length"]).encode(pair.premise, pair.question, pair.answer)
    assert encoded is not None
    assert [c.input_ids for c in encoded.chunks] == [r["input_ids"] for r in case["chunks"]]
    for chunk, recorded in zip(encoded.chunks, case["chunks"], strict=True):
        # the answer runs from lettucedetect's answer start to the final [SEP]
        expected = list(range(recorded["answer_start"], len(recorded["input_ids"]) - 1))
        assert chunk.answer_positions == expected
        assert len(chunk.input_ids) <= case["max_length"]
    assert encoded.offsets == [tuple(o) for o in case["answer_offsets"]]
    assert not encoded.truncated


@pytest.mark.parametrize("case", CASES, ids=by_name)
def test_spans_and_probabilities_equal_lettucedetect(
    case: dict[str, Any], classifiers: Classifiers
) -> None:
    """Per-token probabilities (max over chunks) and spans as lettucedetect's; the score is
    1 minus the highest probability."""
    classifier = classifiers(case["max_length"])
    pair = pair_of(case)
    encoded = classifier.encode(pair.premise, pair.question, pair.answer)
    assert encoded is not None
    probabilities = classifier.token_probabilities(encoded)
    assert probabilities == pytest.approx(case["token_probabilities"], abs=1e-5)
    [result] = TokenJudge(classifier, threshold=0.5).score([pair])
    assert result.outcome == "scored"
    assert result.spans == merged(case["spans"])
    assert result.score == pytest.approx(1 - max(case["token_probabilities"]), abs=1e-5)
    assert not result.truncated


def test_overlapping_reference_spans_are_merged() -> None:
    """The bytes of one character in two tokens, one flagged: lettucedetect reports two
    overlapping spans (the unicode case), ours one."""
    unicode_case = next(c for c in CASES if c["name"] == "unicode_answer")
    assert len(merged(unicode_case["spans"])) < len(unicode_case["spans"])
    score, spans = verdict([0.9, 0.1, 0.8], [(0, 2), (2, 3), (2, 3)], 0.5)
    assert spans == ((0, 3),)
    assert score == pytest.approx(0.1)


def test_verdict_merges_runs_and_scores_the_worst_token() -> None:
    offsets = [(0, 3), (3, 7), (7, 9), (9, 12), (12, 15)]
    score, spans = verdict([0.2, 0.7, 0.9, 0.1, 0.6], offsets, 0.5)
    assert spans == ((3, 9), (12, 15))
    assert score == pytest.approx(0.1)
    score, spans = verdict([0.2, 0.3], offsets[:2], 0.5)
    assert spans == ()
    assert score == pytest.approx(0.7)


@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.5, 0.7, 0.95])
def test_spans_exactly_when_the_score_fails(threshold: float, classifiers: Classifiers) -> None:
    """score >= threshold (supported) exactly when no span is reported, on every case."""
    classifier = classifiers(128)
    results = TokenJudge(classifier, threshold=threshold).score([pair_of(c) for c in CASES])
    for case, result in zip(CASES, results, strict=True):
        assert result.score is not None
        assert (result.score >= threshold) == (result.spans == ()), case["name"]
        for start, end in result.spans:
            assert 0 <= start < end <= len(case["answer"])


def test_batches_give_the_verdicts_of_one_pair_at_a_time(classifiers: Classifiers) -> None:
    """Chunks of several pairs padded into one batch: the same spans and scores."""
    classifier = classifiers(128)
    pairs = [pair_of(c) for c in CASES]
    alone = TokenJudge(classifier, batch_size=1).score(pairs)
    batched = TokenJudge(classifier, batch_size=6).score(pairs)
    for one, many in zip(alone, batched, strict=True):
        assert many.spans == one.spans
        assert many.score == pytest.approx(one.score, abs=1e-4)


def test_the_cache_answers_a_pair_seen_before(
    classifiers: Classifiers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pair scored once is answered from the cache (no model call) with the same spans;
    the question is part of the key."""
    classifier = classifiers(512)
    stats: list[WorkerStats] = []
    judge = TokenJudge(classifier, cache_size=8, on_stats=stats.append)
    pair = pair_of(CASES[0])
    first, duplicate = judge.score([pair, pair])  # a duplicate in one call is scored once
    assert duplicate == first
    calls: list[int] = []
    real = classifier.chunk_probabilities

    def counted(chunks: Any) -> list[list[float]]:
        calls.append(len(chunks))
        return real(chunks)

    monkeypatch.setattr(classifier, "chunk_probabilities", counted)
    [again] = judge.score([pair])
    assert again == first
    assert calls == []
    assert stats[-1] == WorkerStats(0, 0.0, 1)
    assert sum(s.pairs for s in stats) == 1
    other = JudgePair(pair.premise, pair.answer, "Something else entirely?")
    judge.score([other])
    assert len(calls) == 1


def test_a_passage_longer_than_an_input_is_split_not_cut(classifiers: Classifiers) -> None:
    """One passage of several inputs' length: pieces in several chunks, nothing truncated."""
    classifier = classifiers(256)
    passage = " ".join(c["contexts"][0] for c in CASES) * 4
    answer = "Paris is the capital of France."
    assert classifier.count(passage) > 2 * 256
    encoded = classifier.encode(passage, "Which city?", answer)
    assert encoded is not None
    assert len(encoded.chunks) >= 3
    assert all(len(c.input_ids) <= 256 for c in encoded.chunks)
    assert not encoded.truncated
    [result] = TokenJudge(classifier).score([JudgePair(passage, answer, "Which city?")])
    assert result.outcome == "scored"
    assert not result.truncated


def test_a_question_filling_the_input_cuts_the_evidence(classifiers: Classifiers) -> None:
    """No room for passages beside the question and answer: scored, marked truncated."""
    classifier = classifiers(128)
    question = "How long do customers have to return items? " * 12
    [result] = TokenJudge(classifier).score(
        [JudgePair(CASES[0]["contexts"][0], "Customers have 14 days.", question)]
    )
    assert result.outcome == "scored"
    assert result.truncated


def test_an_answer_longer_than_the_input_is_an_error_logged_without_text(
    classifiers: Classifiers,
) -> None:
    classifier = classifiers(128)
    answer = "Customers can return items within 14 days of purchase. " * 20
    with capture_logs() as logs:
        [result] = TokenJudge(classifier).score([JudgePair("Refunds.", answer, None)])
    assert result == JudgeResult.failed("model_error")
    assert [entry["event"] for entry in logs] == ["faithfulness_answer_too_long"]
    assert "Customers" not in str(logs)


def test_a_blank_answer_has_no_claims(classifiers: Classifiers) -> None:
    [result] = TokenJudge(classifiers(512)).score([JudgePair("Refunds.", "  \n", None)])
    assert result.outcome == "no_claims"


@pytest.mark.parametrize("precision", ["bf16_autocast", "bf16", "int8"])
def test_cpu_precisions_run_and_agree_with_fp32(
    precision: TokenPrecision, classifiers: Classifiers
) -> None:
    pairs = [pair_of(c) for c in CASES]
    reference = TokenJudge(classifiers(512)).score(pairs)
    converted = TokenJudge(classifiers(512, precision)).score(pairs)
    for ours, fp32 in zip(converted, reference, strict=True):
        assert ours.outcome == "scored"
        assert ours.score == pytest.approx(fp32.score, abs=0.05)


@pytest.fixture
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def load(config: FaithfulnessConfig, registry: SidecarRegistry | None = None) -> Any:
    return load_token_judge(
        config, registry=registry, on_stats=lambda _: None, stopping=threading.Event()
    )


def test_a_missing_model_names_the_fetch_command(empty_hub_cache: Path, tmp_path: Path) -> None:
    """A hub id not in the cache, and a directory without weights: ModelMissingError with
    `rag-monitor models fetch`, before any heavy import."""
    config = FaithfulnessConfig(judge="token_classifier")
    with pytest.raises(ModelMissingError, match="rag-monitor models fetch") as missing:
        load(config)
    assert missing.value.name == DEFAULT_TOKEN_MODEL
    assert f"huggingface-cli download {DEFAULT_TOKEN_MODEL}" in str(missing.value)
    assert component.missing_models(config) == [DEFAULT_TOKEN_MODEL]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    directory = FaithfulnessConfig(
        judge="token_classifier", token_classifier={"model": str(tmp_path / "empty")}
    )
    with pytest.raises(ModelMissingError, match=r"no model\.safetensors"):
        load(directory)


def test_a_hub_id_loads_from_the_cache_with_its_identity(
    empty_hub_cache: Path, checkpoint: Path
) -> None:
    """The default hub id read from a Hugging Face cache (its main ref), through
    open_judge; the precision gauge set; the name is the judge's identity."""
    root = empty_hub_cache / f"models--{DEFAULT_TOKEN_MODEL.replace('/', '--')}"
    shutil.copytree(checkpoint, root / "snapshots" / ("0" * 40))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)
    config = FaithfulnessConfig(judge="token_classifier", precision="int8", threads=1)
    assert resolve_token_model(DEFAULT_TOKEN_MODEL) == root / "snapshots" / ("0" * 40)
    assert component.missing_models(config) == []
    registry = SidecarRegistry()
    judge = open_judge(
        config, registry=registry, on_stats=lambda _: None, stopping=threading.Event()
    )
    assert isinstance(judge, TokenJudge)
    assert judge.name == judge_identity(config) == "token/tinylettuce-ettin-68m-en@main/t0.5"
    assert registry.get_sample_value("rag_faithfulness_precision_info", {"precision": "int8"})
    [result] = judge.score([pair_of(CASES[0])])
    assert result.outcome == "scored"


def test_models_fetch_plans_the_checkpoint_and_verifies_a_directory(checkpoint: Path) -> None:
    config = FaithfulnessConfig(judge="token_classifier")
    [need] = component.model_needs(config)
    assert (need.repo, need.revision, need.setting) == (
        DEFAULT_TOKEN_MODEL,
        "main",
        "token_classifier.model",
    )
    assert need.weights == ("model.safetensors", "pytorch_model.bin")
    assert "*.json" in need.files
    local = FaithfulnessConfig(
        judge="token_classifier", token_classifier={"model": str(checkpoint)}
    )
    assert component.model_needs(local) == []
    component.load_model(local)  # loads and scores the verification pair
    component.require_extras(local)  # the token-judge extra is installed here


def test_models_fetch_to_a_directory_prints_the_nested_setting(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rag-monitor models fetch --to DIR` with the token judge: the copy under DIR/<hub id>
    is loaded as the sidecar loads it, and the printed YAML sets token_classifier.model."""
    import yaml

    from monitor.runtime import models
    from tests.conftest import make_config

    def download(need: Any, to: Path | None) -> Path:
        assert to is not None
        assert (need.repo, need.revision) == (DEFAULT_TOKEN_MODEL, "main")
        return Path(shutil.copytree(checkpoint, to / need.directory))

    monkeypatch.setattr(models, "download", download)
    config = make_config(detectors={"faithfulness": {"judge": "token_classifier"}})
    out, err = io.StringIO(), io.StringIO()
    assert models.fetch_models(config, tmp_path / "models", out, err) == 0, err.getvalue()
    printed = yaml.safe_load(out.getvalue())
    assert printed == {
        "detectors": {
            "faithfulness": {
                "token_classifier": {"model": str(tmp_path / "models" / DEFAULT_TOKEN_MODEL)}
            }
        }
    }
    assert "verified detectors.faithfulness" in err.getvalue()


def test_spans_and_texts_never_reach_the_logs(
    checkpoint: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading, scoring, a failing model call and a failing tokenization log events and
    counts only: no answer, premise, question or span."""
    config = FaithfulnessConfig(
        judge="token_classifier", token_classifier={"model": str(checkpoint), "max_length": 128}
    )
    caplog.set_level(logging.DEBUG)
    pairs = [pair_of(c) for c in CASES]
    with capture_logs() as logs:
        judge = load(config)
        results = judge.score(pairs)
        monkeypatch.setattr(
            judge.classifier,
            "chunk_probabilities",
            lambda chunks: (_ for _ in ()).throw(RuntimeError("kernel failed")),
        )
        failed = judge.score([JudgePair("Other evidence.", "Another answer.", None)])
        monkeypatch.setattr(
            judge.classifier,
            "encode",
            lambda *a: (_ for _ in ()).throw(RuntimeError("tokenizer failed")),
        )
        judge.score([JudgePair("More evidence.", "A third answer.", None)])
    assert all(r.spans for r in results)
    assert failed == [JudgeResult.failed("model_error")]
    events = [entry["event"] for entry in logs]
    assert events == [
        "faithfulness_model_loaded",
        "faithfulness_scoring_failed",
        "faithfulness_tokenize_failed",
    ]
    logged = str(logs) + caplog.text
    for case, result in zip(CASES, results, strict=True):
        for text in (
            case["answer"],
            *case["contexts"],
            *([case["question"]] if case["question"] else []),
        ):
            assert text
            assert text[:20] not in logged
        for start, end in result.spans:
            assert case["answer"][start:end].strip() not in logged or end - start < 4
        assert str(result.spans) not in logged
    assert "another answer" not in logged.lower()
