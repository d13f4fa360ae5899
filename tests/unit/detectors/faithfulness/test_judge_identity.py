"""A judge's identity: what decides its verdicts is in it, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.faithfulness import llm_prompts
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import HHEM_REPO, PINNED_REVISIONS
from detectors.faithfulness.judge_identity import judge_identity
from monitor.contract.trace import JudgeScore, UnscoredAnswer
from monitor.contract.verdict_exports.otlp_logs import EVALUATOR_ID, record_attributes

LLM = {
    "judge": "openai_compatible",
    "llm_judge": {"endpoint": "http://vllm:8000/v1", "model": "judge-model"},
}


def test_hhem_identity_names_the_model_its_pinned_revision_and_threshold() -> None:
    identity = judge_identity(FaithfulnessConfig())
    assert identity == f"hhem/hallucination_evaluation_model@{PINNED_REVISIONS[HHEM_REPO][:8]}/t0.5"
    assert judge_identity(FaithfulnessConfig(threshold=0.6)).endswith("/t0.6")
    assert "/sentence/" in judge_identity(FaithfulnessConfig(granularity="sentence"))


def test_a_local_directory_is_named_by_its_folder(tmp_path: Path) -> None:
    model = tmp_path / "hhem-finetuned"
    model.mkdir()
    assert judge_identity(FaithfulnessConfig(model=str(model))) == "hhem/hhem-finetuned@local/t0.5"


def test_llm_identity_changes_with_the_model_the_prompts_and_the_claims_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = judge_identity(FaithfulnessConfig.model_validate(LLM))
    assert base.startswith("llm/judge-model/p")
    assert base.endswith("/t0.5")
    other_model = {**LLM, "llm_judge": {**LLM["llm_judge"], "model": "other"}}  # type: ignore[dict-item]
    assert judge_identity(FaithfulnessConfig.model_validate(other_model)) != base
    fewer_claims = {**LLM, "llm_judge": {**LLM["llm_judge"], "max_claims": 5}}  # type: ignore[dict-item]
    assert judge_identity(FaithfulnessConfig.model_validate(fewer_claims)) != base
    monkeypatch.setattr(llm_prompts, "VERIFY_PROMPT", llm_prompts.VERIFY_PROMPT + " Be strict.")
    assert judge_identity(FaithfulnessConfig.model_validate(LLM)) != base
    monkeypatch.undo()
    # the endpoint and the key decide where the judge runs, not its verdicts
    moved = {**LLM, "llm_judge": {**LLM["llm_judge"], "endpoint": "http://elsewhere/v1"}}  # type: ignore[dict-item]
    assert judge_identity(FaithfulnessConfig.model_validate(moved)) == base


def test_every_faithfulness_record_names_its_judge() -> None:
    """gen_ai.evaluation.result records carry the judge's identity, scored or not."""
    scored = record_attributes(JudgeScore("a" * 32, 0.8, 0.5, judge="hhem/x@1/t0.5"), "faith")
    unscored = record_attributes(UnscoredAnswer("a" * 32, "no_context", "llm/m/p1/t0.5"), "faith")
    assert scored[EVALUATOR_ID] == "hhem/x@1/t0.5"
    assert unscored[EVALUATOR_ID] == "llm/m/p1/t0.5"
