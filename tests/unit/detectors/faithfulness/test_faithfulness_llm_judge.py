"""The openai_compatible judge without a network: its settings (errors name the key), the
strict reading of its replies, Retry-After, prices, and judge calibration per judge in
the review store and report."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from detectors.faithfulness.component import missing_models, model_needs
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_contract import batch_size_for
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.llm_prompts import parse_claims, parse_verdicts
from detectors.faithfulness.openai_chat import (
    parse_retry_after,
    read_content,
    read_usage,
    status_outcome,
)
from detectors.faithfulness.prices import Prices, Usage
from detectors.faithfulness.worker import STALL_S, stall_after_s
from detectors.review.calibration import judge_calibration, judge_calibrations
from detectors.review.model import ReviewItem, Verdict
from detectors.review.report import build_report, render_markdown, summary
from detectors.review.store import ReviewStore, item_from_record, item_record, merge_items
from monitor.runtime.config_loading import ConfigError, explain, load_config

LLM = {"endpoint": "http://vllm:8000/v1/", "model": "judge-model"}


def llm_config(**llm_judge: Any) -> FaithfulnessConfig:
    return FaithfulnessConfig.model_validate(
        {"judge": "openai_compatible", "llm_judge": LLM | llm_judge}
    )


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("faithfulness", "problem"),
    [
        (
            {"judge": "openai_compatible"},
            "detectors.faithfulness.llm_judge: Value error, endpoint is required when judge "
            "is openai_compatible",
        ),
        (
            {"judge": "openai_compatible", "llm_judge": {"endpoint": "http://vllm:8000/v1"}},
            "detectors.faithfulness.llm_judge: Value error, model is required",
        ),
        (
            {"judge": "openai_compatible", "llm_judge": {**LLM, "endpoint": "file:///etc"}},
            "detectors.faithfulness.llm_judge.endpoint: Value error, must be an http:// or "
            "https:// URL",
        ),
        (
            {"judge": "openai_compatible", "llm_judge": LLM, "granularity": "sentence"},
            "detectors.faithfulness.granularity: Value error, sentence applies to the hhem judge",
        ),
        (
            {"llm_judge": {"input_usd_per_1m_tokens": 0.15}},
            "detectors.faithfulness.llm_judge.output_usd_per_1m_tokens: Value error, set "
            "input_usd_per_1m_tokens and output_usd_per_1m_tokens together",
        ),
        ({"judge": "gpt"}, "detectors.faithfulness.judge: Input should be 'hhem', "),
        ({"llm_judge": {"timeout_s": 0}}, "detectors.faithfulness.llm_judge.timeout_s: "),
        ({"llm_judge": {"api_key": "sk-1"}}, "detectors.faithfulness.llm_judge.api_key: unknown"),
    ],
    ids=[
        "no-endpoint",
        "no-model",
        "not-http",
        "sentence-granularity",
        "one-price",
        "unknown-judge",
        "zero-timeout",
        "key-in-the-file",
    ],
)
def test_judge_settings_are_checked_at_load_naming_the_key(
    tmp_path: Path, faithfulness: dict[str, Any], problem: str
) -> None:
    """A config the judge cannot run with stops at load with the key's full path."""
    path = tmp_path / "rag-monitor.yaml"
    path.write_text(yaml.safe_dump({"detectors": {"faithfulness": faithfulness}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


def test_the_default_judge_is_hhem_and_every_key_is_explained() -> None:
    """Without judge: hhem, llm_judge unset and valid; check-config --explain lists each
    llm_judge key with its description."""
    config = FaithfulnessConfig()
    assert (config.judge, config.llm_judge.endpoint) == ("hhem", None)
    lines = [line for line in explain() if ".faithfulness.llm_judge." in line]
    keys = {line.split(":", 1)[0].rsplit(".", 1)[1] for line in lines}
    assert keys == set(type(config.llm_judge).model_fields)
    assert all("  # " in line and not line.endswith("# None") for line in lines)


def test_the_llm_judge_needs_no_model_files_and_sizes_its_batches() -> None:
    """openai_compatible: nothing to fetch or find missing; batches of its concurrency; the
    identity carries the model; the stall bound covers two requests with their retries."""
    config = llm_config(concurrency=6, timeout_s=10, max_retries=2)
    assert config.llm_judge.endpoint == "http://vllm:8000/v1"  # the trailing / dropped
    assert model_needs(config) == []
    assert missing_models(config) == []
    assert batch_size_for(config) == 6
    assert judge_identity(config).startswith("llm/judge-model/p")
    assert stall_after_s(config) == STALL_S + 2 * 3 * (10 + 30)
    assert stall_after_s(FaithfulnessConfig()) == STALL_S


# --- replies, read strictly ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "claims"),
    [
        ({"claims": ["Mars has two moons.", " Phobos is one. "]}, ["Mars has two moons.", "Phobos is one."]),
        ({"claims": []}, []),
        ({"claims": ["ok"], "extra": 1}, None),
        ({"claims": "Mars has two moons."}, None),
        ({"claims": ["ok", 3]}, None),
        ({"claims": ["ok", "  "]}, None),
        ({}, None),
    ],
    ids=["claims", "none", "extra-key", "not-a-list", "not-a-string", "blank", "empty-object"],
)  # fmt: skip
def test_claims_are_read_exactly_as_the_schema_says(
    content: dict[str, Any], claims: list[str] | None
) -> None:
    """A list of non-blank strings under "claims" alone; anything else is malformed."""
    if claims is None:
        with pytest.raises(ValueError, match="claim"):
            parse_claims(content)
    else:
        assert parse_claims(content) == claims


def _verdicts(*pairs: tuple[Any, Any]) -> dict[str, Any]:
    return {"verdicts": [{"claim": n, "verdict": v} for n, v in pairs]}


@pytest.mark.parametrize(
    ("content", "supported"),
    [
        (_verdicts((2, "unsupported"), (1, "supported"), (3, "supported")), [True, False, True]),
        (_verdicts((1, "supported"), (2, "supported")), None),
        (_verdicts((1, "supported"), (1, "unsupported"), (2, "supported")), None),
        (_verdicts((1, "supported"), (2, "supported"), (4, "supported")), None),
        (_verdicts((True, "supported"), (2, "supported"), (3, "supported")), None),
        (_verdicts((1, "yes"), (2, "supported"), (3, "supported")), None),
        ({"verdicts": [{"claim": 1, "verdict": "supported", "why": "x"}]}, None),
        ({"verdicts": [], "score": 1.0}, None),
    ],
    ids=[
        "any-order",
        "one-missing",
        "judged-twice",
        "out-of-range",
        "bool-number",
        "unknown-verdict",
        "extra-item-key",
        "extra-key",
    ],
)
def test_verdicts_are_one_per_claim_number_or_malformed(
    content: dict[str, Any], supported: list[bool] | None
) -> None:
    """Exactly one verdict, supported or unsupported, for each claim 1..3, in any order."""
    if supported is None:
        with pytest.raises(ValueError, match=r"claim|verdict"):
            parse_verdicts(content, 3)
    else:
        assert parse_verdicts(content, 3) == supported


def _reply(content: Any, finish: str | None = "stop", **message: Any) -> dict[str, Any]:
    choice = {"message": {"role": "assistant", "content": content, **message}}
    return {"choices": [choice | ({"finish_reason": finish} if finish else {})]}


@pytest.mark.parametrize(
    ("reply", "content"),
    [
        (_reply('{"claims": []}'), {"claims": []}),
        (_reply('{"claims": []}', finish=None), {"claims": []}),
        (_reply('{"claims": ["cut'), None),
        (_reply('{"claims": []}', finish="length"), None),
        (_reply(None, refusal="I can't help with that."), None),
        (_reply('["a", "b"]'), None),
        ({"choices": []}, None),
        ({"error": {"message": "overloaded"}}, None),
    ],
    ids=["object", "no-finish-reason", "not-json", "cut", "refusal", "array", "no-choice", "error"],
)
def test_only_a_whole_json_object_is_content(reply: dict[str, Any], content: Any) -> None:
    """The first choice's message, finished, not refused, holding a JSON object."""
    assert read_content(reply) == content


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 120, "completion_tokens": 15}, Usage(120, 15)),
        ({"prompt_tokens": 120}, None),
        ({"prompt_tokens": -1, "completion_tokens": 15}, None),
        ({"prompt_tokens": True, "completion_tokens": 15}, None),
        (None, None),
    ],
    ids=["usage", "no-completion", "negative", "bool", "absent"],
)
def test_usage_is_read_when_whole(usage: Any, expected: Usage | None) -> None:
    """Prompt and completion tokens as non-negative integers, or no usage at all."""
    assert read_usage({"usage": usage}) == expected


NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        (format_datetime(datetime(2026, 1, 1, 12, 0, 20, tzinfo=UTC), usegmt=True), 20.0),
        (format_datetime(datetime(2026, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True), 0.0),
        ("soon", None),
        ("-5", None),
        (None, None),
    ],
    ids=["seconds", "zero", "http-date", "date-past", "garbage", "negative", "absent"],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, seconds: float | None) -> None:
    """Delay seconds or an HTTP date (a past one: no wait); anything else: own backoff."""
    assert parse_retry_after(header, NOW) == seconds


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(429, "rate_limited"), (500, "server_error"), (503, "server_error"), (408, "server_error"),
     (400, "client_error"), (401, "client_error"), (404, "client_error")],
    ids=str,
)  # fmt: skip
def test_statuses_map_to_outcomes(status: int, outcome: str) -> None:
    """429 is rate limiting, 5xx and 408 the server's trouble (both retried), other 4xx the
    request's (not retried)."""
    assert status_outcome(status) == outcome


# --- prices ----------------------------------------------------------------------------------


def test_configured_prices_are_per_million_tokens() -> None:
    """1,000 tokens in at 0.15 and 200 out at 0.6 per million: 0.00027 USD."""
    prices = llm_config(input_usd_per_1m_tokens=0.15, output_usd_per_1m_tokens=0.6).llm_judge
    assert prices.prices() == Prices(0.15, 0.6)
    assert Prices(0.15, 0.6).cost(Usage(1000, 200)) == pytest.approx(0.00027)
    # Unset, the table decides: it does not know this model.
    assert llm_config().llm_judge.prices() is None
    assert llm_config(model="gpt-4o-mini").llm_judge.prices() == Prices.lookup("gpt-4o-mini")


def test_without_prices_the_table_prices_known_models_only() -> None:
    """No prices set: a model genai-prices knows costs what it says; a self-hosted one has
    no price (its cost is not counted)."""
    prices = Prices.lookup("gpt-4o-mini")
    assert prices is not None
    expected = calc_price(PriceUsage(input_tokens=5000, output_tokens=300), "gpt-4o-mini")
    assert prices.cost(Usage(5000, 300)) == pytest.approx(float(Decimal(expected.total_price)))
    assert Prices.lookup("my-org/llama-3.1-8b-finetune-judge") is None


# --- judge calibration per judge -------------------------------------------------------------

GPT = "openai_compatible:gpt-4o-mini"


def reviewed_item(index: int, score: float, judge: str | None) -> ReviewItem:
    return ReviewItem(
        trace_id=f"t{index}",
        time=0.0,
        query="q",
        answer="a",
        hhem_score=score,
        hhem_threshold=0.5,
        judge=judge,
    )


# (score, judge, human verdict): items stored before judges had names are HHEM's.
REVIEWED = [
    (0.9, None, "yes"), (0.2, None, "no"), (0.7, "hhem", "no"),
    (1.0, GPT, "yes"), (0.5, GPT, "yes"), (0.25, GPT, "no"), (0.0, GPT, "partly"),
    (0.75, GPT, "no_claim"),
]  # fmt: skip


def reviewed() -> list[tuple[ReviewItem, Verdict]]:
    pairs = [
        (reviewed_item(i, score, judge), Verdict(f"t{i}", human))  # type: ignore[arg-type]
        for i, (score, judge, human) in enumerate(REVIEWED)
    ]
    unscored = ReviewItem(trace_id="u", time=0.0, query="q", answer="a")
    return [*pairs, (unscored, Verdict("u", "yes"))]


def test_each_judge_is_calibrated_on_its_own_scores() -> None:
    """HHEM (named or not) and the LLM judge get their own matrices: never pooled."""
    hhem, gpt = judge_calibrations(reviewed())
    assert (hhem.judge, gpt.judge) == ("hhem", GPT)
    s, u = "supported", "unsupported"
    assert hhem.matrix == {(s, s): 1, (u, u): 1, (s, u): 1}
    assert gpt.matrix == {(s, s): 2, (u, u): 2}
    assert (hhem.n, gpt.n, gpt.no_claim, gpt.partly) == (3, 4, 1, 1)
    assert hhem.unscored == gpt.unscored == 1
    assert gpt.agreement == 1.0
    assert judge_calibration(reviewed()) == hhem  # the default judge, as before


def test_the_report_has_a_calibration_section_per_judge() -> None:
    """Two judges, two sections and two summaries; the headline one rests on more pairs."""
    report = build_report(reviewed(), now=0.0)
    text = render_markdown(report)
    assert "Judge calibration: HHEM against reviewers" in text
    assert f"Judge calibration: {GPT} against reviewers" in text
    assert f"4 reviewed items with a {GPT} score" in text
    assert report.judge.judge == GPT
    line = summary(report)
    assert "HHEM agreement 66.7% on 3" in line
    assert f"{GPT} agreement 100.0% on 4" in line


def test_the_store_keeps_the_judge_with_its_score(tmp_path: Path) -> None:
    """The judge's name goes with the score through the record, attach_score and a merge; a
    record written before judges had names reads as no name (HHEM)."""
    item = reviewed_item(1, 0.5, GPT)
    assert item_from_record(item_record(item)).judge == GPT
    old = item_record(item)
    del old["judge"]
    assert item_from_record(old).judge is None
    unscored = ReviewItem(trace_id="t1", time=0.0, query="q", answer="a")
    assert merge_items(unscored, item).judge == GPT
    assert merge_items(item, reviewed_item(1, 0.9, "hhem")).judge == GPT
    store = ReviewStore(tmp_path)
    try:
        store.add(unscored)
        store.attach_score("t1", 0.25, 0.5, GPT)
        held = store.get("t1")
        assert held is not None
        assert (held.hhem_score, held.judge) == (0.25, GPT)
        store.attach_score("t1", 0.75, 0.5)
        assert store.get("t1").judge == "hhem"  # type: ignore[union-attr]
    finally:
        store.close()
