"""The one duration grammar (Prometheus durations) of config keys, rule windows and --since."""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.drift.report import write_report
from monitor.contract.config import Config
from monitor.contract.durations import parse_duration
from monitor.runtime.config_loading import ConfigError, load_config


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("15s", 15.0),
        ("5m", 300.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("7d", 604_800.0),
        ("2w", 1_209_600.0),
        ("1y", 31_536_000.0),
        ("500ms", 0.5),
        ("1d2h3m4s5ms", 93_784.005),
    ],
    ids=[
        "bare-zero", "zero-s", "seconds", "minutes", "for-default", "hours", "compound", "days",
        "weeks", "year", "milliseconds", "every-unit",
    ],
)  # fmt: skip
def test_prometheus_durations_parse_to_seconds(text: str, seconds: float) -> None:
    """Each Prometheus duration gives its length in seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "soon", "5", "m", "5 m", " 5m", "5m\n", "1.5h", "-5m", "5M", "30m1h", "1h1h", "5min"],
    ids=[
        "empty", "word", "no-unit", "no-digits", "inner-space", "leading-space", "newline",
        "decimal", "negative", "upper-case", "wrong-order", "repeated-unit", "long-unit",
    ],
)  # fmt: skip
def test_anything_else_is_refused_naming_the_text(text: str) -> None:
    """A string outside the grammar raises ValueError quoting it and showing examples."""
    with pytest.raises(ValueError, match="is not a duration") as caught:
        parse_duration(text)
    assert str(caught.value).startswith(f"{text!r} is not a duration")
    assert "1h30m" in str(caught.value)


def test_report_since_uses_the_grammar(tmp_path: Path) -> None:
    """report drift --since takes the same durations and refuses others before reading state."""
    with pytest.raises(ValueError, match=r"^'1\.5d' is not a duration"):
        write_report(Config(), "1.5d", tmp_path / "report.md")


@pytest.mark.parametrize(
    "key", ["FOR", "WINDOW", "EVALUATION_INTERVAL", "BASELINE", "RELEASE_WINDOW"], ids=str.lower
)
def test_guardrail_durations_use_the_grammar(key: str) -> None:
    """guardrails.for and the rule windows accept 1h30m and refuse 90 minutes, naming the key."""
    name = f"RAG_MONITOR_GUARDRAILS__{key}"
    assert (
        load_config(environ={name: "1h30m"}).guardrails.model_dump(by_alias=True)[key.lower()]
        == "1h30m"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: "90 minutes"})
    assert caught.value.problems == [
        f"guardrails.{key.lower()}: Value error, '90 minutes' is not a duration: digits and a "
        "unit (ms, s, m, h, d, w, y), largest unit first, like 30s, 5m, 1h30m or 7d "
        "(got '90 minutes')"
    ]
