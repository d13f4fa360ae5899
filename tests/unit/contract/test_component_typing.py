"""The component contract is typed by its config section: mypy rejects a hook that takes
another section than the component's ``config_model``."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[3]
COMPONENT = """
from detectors.cost.config import CostConfig
from detectors.slices.config import SlicesConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import RuleFragment


def build(config: SlicesConfig, context: BuildContext) -> Detector:
    raise NotImplementedError


def rules(config: {section}, guardrails: GuardrailsConfig) -> RuleFragment:
    return RuleFragment()


COMPONENT = DetectorComponent(
    name="typed", config_model=SlicesConfig, description="", build=build, rules=rules
)
"""


def _mypy(tmp_path: Path, section: str) -> tuple[str, int]:
    module = tmp_path / "typed_component.py"
    module.write_text(COMPONENT.replace("{section}", section))
    out, err, status = mypy_api.run([
        "--strict", "--ignore-missing-imports", "--follow-imports=silent",
        "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(module),
    ])  # fmt: skip
    return out + err, status


@pytest.mark.parametrize(
    ("section", "accepted"), [("SlicesConfig", True), ("CostConfig", False)], ids=str
)
def test_a_hook_must_take_its_components_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, accepted: bool
) -> None:
    """``rules`` taking the component's own section passes; taking another one is an
    error at the component's definition (the section type is inferred from
    ``config_model``)."""
    monkeypatch.chdir(ROOT)
    report, status = _mypy(tmp_path, section)
    if accepted:
        assert status == 0, report
    else:
        assert status == 1, report
        assert 'Argument "rules" to "DetectorComponent" has incompatible type' in report, report
