"""What detectors provide for one another (monitor.contract.shared): each value comes from its
owner's section, reads as its default without an owner, and has one owner."""

from __future__ import annotations

import pytest

from monitor.contract.config import shared_values
from monitor.contract.shared import COMPARED_WITH_REVIEW, REVIEW_ENABLED, SharedValues
from monitor.contract.trace import EvaluationResult
from tests.conftest import make_config


def test_each_value_comes_from_its_owners_section() -> None:
    """The evaluations section gives the pass rules of the evaluations set
    compare_with_review, and only those; the review section gives whether review is on."""
    config = make_config(
        detectors={
            "review": {"enabled": True},
            "evaluations": {
                "evaluations": {
                    "groundedness": {"score_min": 0.5, "compare_with_review": True},
                    "answer_relevancy": {"score_min": 0.7},
                }
            },
        }
    )
    shared = shared_values(config)
    rules = shared[COMPARED_WITH_REVIEW]
    assert list(rules) == ["groundedness"]
    assert rules["groundedness"](EvaluationResult(name="groundedness", score=0.4)) is False
    assert shared[REVIEW_ENABLED] is True


def test_the_defaults_hold_where_the_owners_say_nothing() -> None:
    """Review off and no evaluation compared: the shadow keeps no text and review compares
    nothing; a value no component provides reads as its default."""
    shared = shared_values(make_config())
    assert shared[REVIEW_ENABLED] is False
    assert dict(shared[COMPARED_WITH_REVIEW]) == {}
    assert SharedValues()[REVIEW_ENABLED] is False


def test_a_value_has_one_owner() -> None:
    """Two components providing the same value are refused when the core collects them."""
    with pytest.raises(TypeError, match="review enabled"):
        SharedValues([REVIEW_ENABLED.provide(True), REVIEW_ENABLED.provide(False)])
