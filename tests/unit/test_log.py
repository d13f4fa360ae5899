"""The log pipeline's redaction stage: request text never reaches a log line."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from monitor.log import REDACTED, RedactText, configure_logging


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"query": "secret", "trace_id": "t1"}, {"query": REDACTED, "trace_id": "t1"}),
        ({"request": {"answer": "secret", "n": 2}}, {"request": {"answer": REDACTED, "n": 2}}),
        ({"items": [{"text": "secret"}, 3]}, {"items": [{"text": REDACTED}, 3]}),
        ({"a": {"b": {"c": {"prompt": "secret"}}}}, {"a": {"b": {"c": {"prompt": REDACTED}}}}),
        ({"contexts": [{"doc_id": "d1"}]}, {"contexts": REDACTED}),
    ],
    ids=["top-level", "nested-mapping", "list-of-mappings", "deep", "whole-value"],
)
def test_text_keys_are_redacted_at_any_depth(
    event: dict[str, Any], expected: dict[str, Any]
) -> None:
    """A text-bearing key is redacted wherever it sits; other values pass unchanged."""
    assert RedactText()(None, "info", dict(event)) == expected


def test_pathological_nesting_is_cut_not_recursed_forever() -> None:
    """Past the depth limit a value is redacted whole rather than walked."""
    nested: dict[str, Any] = {"leaf": "x"}
    for _ in range(50):
        nested = {"n": nested}
    out = RedactText()(None, "info", {"deep": nested})
    depth, node = 0, out["deep"]
    while isinstance(node, dict):
        node, depth = node["n"], depth + 1
    assert node == REDACTED
    assert depth < 50


def test_configured_logger_writes_json_without_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    """configure_logging renders JSON on stderr with nested request text redacted."""
    configure_logging("info")
    try:
        structlog.get_logger("t").info(
            "seen", trace_id="t1", request={"query": "my secret question"}
        )
    finally:
        structlog.reset_defaults()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["event"] == "seen"
    assert record["request"] == {"query": REDACTED}
    assert "my secret question" not in line
