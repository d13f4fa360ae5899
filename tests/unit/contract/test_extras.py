"""A detector or backend enabled without its extra stops the sidecar before it serves, with
the `pip install` to run; the core dependencies carry none of the heavy distributions."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.contract.extras import EXTRA_MODULES, MissingExtraError
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.runtime.cli import main
from monitor.runtime.config_loading import load_config
from monitor.runtime.sidecar import build_detectors

ROOT = Path(__file__).resolve().parents[3]
NO_FAITHFULNESS = {"faithfulness": {"enabled": False}}
HHEM_INSTEAD = (
    ", or set detectors.faithfulness.judge_location: kafka (the scorers judge), "
    "judge: openai_compatible or enabled: false"
)

CASES = [
    pytest.param(
        {},
        "torch",
        "detectors.faithfulness (judge: hhem) needs the hhem extra: "
        f"pip install 'rag-monitor[hhem]'{HHEM_INSTEAD} (not importable: torch)",
        id="faithfulness-default-hhem-without-torch",
    ),
    pytest.param(
        {"detectors": {"faithfulness": {"precision": "fp32"}}},
        "onnxruntime",
        "detectors.faithfulness (judge: hhem) needs the hhem extra: "
        f"pip install 'rag-monitor[hhem]'{HHEM_INSTEAD} (not importable: onnxruntime)",
        id="faithfulness-hhem-without-onnxruntime",
    ),
    pytest.param(
        {"detectors": {"faithfulness": {"judge": "token_classifier"}}},
        "transformers",
        "detectors.faithfulness (judge: token_classifier) needs the token-judge extra: "
        f"pip install 'rag-monitor[token-judge]'{HHEM_INSTEAD} (not importable: transformers)",
        id="faithfulness-token-classifier-without-transformers",
    ),
    pytest.param(
        {"detectors": {"drift": {"backend": "alibi"}, **NO_FAITHFULNESS}},
        "alibi_detect",
        "detectors.drift (backend: alibi) needs the alibi extra: "
        "pip install 'rag-monitor[alibi]', or set backend: scipy (not importable: alibi_detect)",
        id="drift-alibi",
    ),
    pytest.param(
        {"detectors": {"drift": {"embedder": "all-MiniLM-L6-v2"}, **NO_FAITHFULNESS}},
        "transformers",
        "detectors.drift (embedder: all-MiniLM-L6-v2) needs the embedder extra: "
        "pip install 'rag-monitor[embedder]', or set embedder: null (traced query vectors) "
        "(not importable: transformers)",
        id="drift-embedder",
    ),
    pytest.param(
        {
            "detectors": {
                "faithfulness": {
                    "phoenix": {"enabled": True},
                    "judge": "openai_compatible",
                    "llm_judge": {"endpoint": "http://127.0.0.1:9/v1", "model": "judge"},
                }
            },
        },
        "phoenix",
        "detectors.faithfulness.phoenix (annotate: true) needs the phoenix extra: "
        "pip install 'rag-monitor[phoenix]', or set "
        "detectors.faithfulness.phoenix.enabled: false "
        "(not importable: phoenix)",
        id="phoenix-annotations",
    ),
]


def _config_file(tmp_path: Path, settings: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    service = {"service": {"state_dir": str(tmp_path / "state")}}
    path.write_text(yaml.safe_dump({**service, **settings}), encoding="utf-8")
    return path


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """The modules as if their distribution were not installed (find_spec answers None)."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize(("settings", "hidden", "message"), CASES)
def test_missing_extra_stops_the_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings: dict[str, Any],
    hidden: str,
    message: str,
) -> None:
    """Building the detectors fails with the extra to install and the setting to change."""
    _hide(monkeypatch, hidden)
    config = load_config(_config_file(tmp_path, settings), environ={})
    with pytest.raises(MissingExtraError) as raised:
        build_detectors(config, SidecarRegistry())
    assert str(raised.value) == message


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_run_reports_the_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rag-monitor run` with the default judge and no torch exits 1 naming the install."""
    _hide(monkeypatch, "torch")
    assert main(["run", "--config", str(_config_file(tmp_path, {}))]) == 1
    err = capsys.readouterr().err
    assert (
        "invalid configuration: detectors.faithfulness (judge: hhem) needs the hhem extra: "
        "pip install 'rag-monitor[hhem]'"
    ) in err


@pytest.mark.parametrize(("settings", "hidden", "message"), CASES)
def test_check_config_refuses_what_the_start_refuses(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    settings: dict[str, Any],
    hidden: str,
    message: str,
) -> None:
    """`rag-monitor check-config` exits 1 with the start's line: the extra and the setting."""
    _hide(monkeypatch, hidden)
    assert main(["check-config", str(_config_file(tmp_path, settings))]) == 1
    assert capsys.readouterr() == ("", f"invalid configuration: {message}\n")


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_score_reports_the_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rag-monitor score` with the HHEM judge and no transformers exits 1 naming the hhem extra."""
    _hide(monkeypatch, "transformers")
    settings = {
        "collectors": {"kafka": {"bootstrap_servers": "127.0.0.1:9"}},
        "detectors": {"faithfulness": {"judge_location": "kafka"}},
    }
    assert main(["score", "--config", str(_config_file(tmp_path, settings))]) == 1
    assert capsys.readouterr().err == (
        "rag-monitor score: detectors.faithfulness (judge: hhem) needs the hhem extra: "
        "pip install 'rag-monitor[hhem]', or set judge: openai_compatible "
        "(not importable: transformers)\n"
    )


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_demo_reports_the_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rag-monitor demo` on a core install (its inline HHEM judge) exits 1 naming the hhem extra."""
    _hide(monkeypatch, "torch")
    argv = ["demo", "--config", str(_config_file(tmp_path, {})), "--duration", "1"]
    assert main(argv) == 1
    assert "needs the hhem extra: pip install 'rag-monitor[hhem]'" in capsys.readouterr().err


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_report_drift_reports_the_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rag-monitor report drift` without matplotlib exits 1 naming the report extra."""
    _hide(monkeypatch, "matplotlib")
    out = tmp_path / "report.html"
    argv = ["report", "drift", "--config", str(_config_file(tmp_path, {})), "--out", str(out)]
    assert main(argv) == 1
    assert "needs the report extra: pip install 'rag-monitor[report]'" in capsys.readouterr().err
    assert not out.exists()


def test_missing_models_leaves_hhem_to_the_build_without_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's missing-model check imports no hub client without the extra (the build names it)."""
    from detectors.faithfulness.component import COMPONENT

    assert COMPONENT.models is not None
    config = load_config(_config_file(tmp_path, {}), environ={}).detectors.faithfulness
    directory = str(tmp_path / "no-model")
    config = config.model_copy(update={"model": directory})
    assert COMPONENT.models.missing(config) == [directory]
    _hide(monkeypatch, "torch")
    assert COMPONENT.models.missing(config) == []


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_models_fetch_names_the_extras_without_the_hub_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rag-monitor models fetch` on a core install exits with the extras that bring the hub client."""
    _hide(monkeypatch, "huggingface_hub")
    assert main(["models", "fetch", "--config", str(_config_file(tmp_path, {}))]) != 0
    err = capsys.readouterr().err
    assert "needs the Hugging Face hub client" in err
    assert "pip install 'rag-monitor[hhem]'" in err


def test_drift_missing_embedder_needs_no_hub_client_without_an_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drift without an embedder reports nothing missing, with the hub client absent."""
    from detectors.drift.component import COMPONENT

    _hide(monkeypatch, "huggingface_hub")
    config = load_config(_config_file(tmp_path, {}), environ={}).detectors.drift
    assert COMPONENT.models is not None
    assert COMPONENT.models.missing(config) == []


def test_core_settings_build_with_every_extra_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faithfulness off, drift on scipy without an embedder: nothing optional is needed."""
    _hide(monkeypatch, *{module for modules in EXTRA_MODULES.values() for module in modules})
    config = load_config(_config_file(tmp_path, {"detectors": NO_FAITHFULNESS}), environ={})
    names = [type(detector).__name__ for detector in build_detectors(config, SidecarRegistry())]
    assert "DriftDetector" in names


def _top_level_imports(path: Path) -> set[str]:
    """The top-level modules a file imports in its module body (not inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_core_packages_import_optional_libraries_only_where_used() -> None:
    """monitor, collectors, alerts and demo import no extra's module at module level."""
    optional = {module for modules in EXTRA_MODULES.values() for module in modules}
    offenders = [
        f"{path.relative_to(ROOT)}: {sorted(_top_level_imports(path) & optional)}"
        for package in ("monitor", "collectors", "alerts", "demo")
        for path in sorted((ROOT / package).rglob("*.py"))
        if _top_level_imports(path) & optional
    ]
    assert offenders == []


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_core_dependencies_leave_the_heavy_ones_to_extras() -> None:
    """pyproject's core has none of the heavy distributions; each is in its named extra."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    core = {_distribution(r) for r in project["dependencies"]}
    extras = {
        name: {_distribution(r) for r in requirements}
        for name, requirements in project["optional-dependencies"].items()
    }
    heavy = {
        "hhem": {"torch", "transformers", "onnx", "onnxruntime"},
        "token-judge": {"torch", "transformers"},
        "alibi": {"alibi-detect"},
        "phoenix": {"arize-phoenix", "pyarrow"},
        "report": {"matplotlib"},
    }
    assert core.isdisjoint(set().union(*heavy.values()))
    for extra, distributions in heavy.items():
        assert distributions <= extras[extra], extra
    assert project["optional-dependencies"]["all"] == [
        "rag-monitor[hhem,token-judge,llm-judge,alibi,phoenix,report]"
    ]
