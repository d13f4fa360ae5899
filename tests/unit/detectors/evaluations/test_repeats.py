"""Which results are the same result, and how long a repeat is recognized."""

from __future__ import annotations

from dataclasses import replace

import pytest

from detectors.evaluations.config import EvaluationsConfig
from detectors.evaluations.detector import EvaluationsDetector
from detectors.evaluations.names import DUPLICATES_TOTAL, UNMATCHED_TOTAL
from detectors.evaluations.repeats import CountedResults, result_identity
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult
from tests.unit.detectors.evaluations.test_evaluations import CONFIG, count, trace

TRACE = "a" * 32
SPAN = "b" * 16
RESULT = EvaluationResult("answer_relevancy", score=0.9, trace_id=TRACE, span_id=SPAN)


def _with(**changes: object) -> EvaluationResult:
    return replace(RESULT, **changes)


@pytest.mark.parametrize(
    ("other", "same"),
    [
        (_with(explanation="another wording"), True),
        (_with(score=0.2), False),
        (_with(label="relevant"), False),
        (_with(error_type="timeout"), False),  # a second judge's failure beside the verdict
        (_with(span_id="c" * 16), False),
        (_with(span_id=None), False),
        (_with(name="toxicity"), False),
        (_with(response_id="resp-1"), False),
        (_with(trace_id="d" * 32), False),
    ],
    ids=["explanation", "score", "label", "error-type", "span", "no-span", "name",
         "response-id", "trace"],
)  # fmt: skip
def test_a_result_is_its_trace_span_name_response_and_verdict(
    other: EvaluationResult, same: bool
) -> None:
    """Trace, span, name, response id, score, label and error.type make a result; the
    explanation's wording does not."""
    assert (result_identity(other) == result_identity(RESULT)) is same


def test_a_result_naming_neither_trace_nor_response_has_no_identity() -> None:
    """Such a result cannot be told from another: it is counted each time it arrives."""
    anonymous = EvaluationResult("answer_relevancy", score=0.9)
    assert result_identity(anonymous) is None
    counted = CountedResults(10)
    assert counted.first_time(anonymous)
    assert counted.first_time(anonymous)
    assert len(counted) == 0
    assert result_identity(anonymous, TRACE) == result_identity(_with(span_id=None))
    assert result_identity(EvaluationResult("x", response_id="resp-1")) is not None


def test_a_repeat_is_recognized_within_the_horizon_and_forgotten_beyond_it() -> None:
    """The last ``capacity`` results are remembered, least recently seen forgotten first."""
    counted = CountedResults(3)
    first, second, third, fourth = (_with(span_id=f"{i:016x}") for i in range(4))
    assert [counted.first_time(r) for r in (first, second, third)] == [True, True, True]
    assert not counted.first_time(first)  # seen again: now the most recent
    assert counted.first_time(fourth)  # second, the least recently seen, is forgotten
    assert len(counted) == 3
    assert not counted.first_time(first)
    assert counted.first_time(second)


def test_one_verdict_from_a_span_event_a_log_record_and_a_retry_counts_once() -> None:
    """The same result inside its trace and twice as an event: counted once under the
    trace's variant, the repeats as duplicates, none unmatched; a later repeat whose
    trace left the variant map is still a duplicate, not unmatched."""
    registry = SidecarRegistry()
    config = EvaluationsConfig.model_validate(
        {**CONFIG.model_dump(exclude_none=True), "max_tracked_traces": 1}
    )
    detector = EvaluationsDetector(config, registry)
    detector.observe(trace(TRACE, RESULT, variant="canary"))
    detector.observe_event(RESULT)
    detector.observe_event(RESULT)
    detector.observe(trace("e" * 32))  # TRACE leaves the one-trace variant map
    detector.observe_event(RESULT)
    assert count(registry, "answer_relevancy", "pass", "canary") == 1
    assert count(registry, "answer_relevancy", "pass") == 0
    assert registry.get_sample_value(DUPLICATES_TOTAL) == 3
    assert registry.get_sample_value(UNMATCHED_TOTAL) == 0


def test_results_of_a_record_are_identified_by_the_records_trace() -> None:
    """A rag-trace/1 record's results name no trace of their own: the record's trace id
    stands in, so a log record of the same verdict (no span id) is a duplicate."""
    registry = SidecarRegistry()
    detector = EvaluationsDetector(CONFIG, registry)
    in_record = EvaluationResult("hallucination", label="factual")
    detector.observe(trace(TRACE, in_record, in_record))
    detector.observe_event(EvaluationResult("hallucination", label="factual", trace_id=TRACE))
    assert count(registry, "hallucination", "pass") == 1
    assert registry.get_sample_value(DUPLICATES_TOTAL) == 2
