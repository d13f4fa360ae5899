"""The docs site: its generated reference pages are current, it builds strictly, and every
alert's runbook link points at a section of its Alerts page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import BaseModel

from alerts.reference import (
    REGENERATE,
    configuration_page,
    metric_families,
    render_pages,
    role_families,
)
from alerts.rules import render_rules
from monitor.contract.components import load_components
from monitor.contract.config import Config
from monitor.runtime.config_loading import config_keys
from tests.conftest import REPO

DOCS = REPO / "docs"
GENERATED = DOCS / "pages" / "reference"


@pytest.mark.parametrize("name", sorted(render_pages()), ids=str)
def test_committed_reference_page_is_current(name: str) -> None:
    """Each generated page under docs/pages/reference equals what the generator writes now."""
    committed = (GENERATED / name).read_text(encoding="utf-8")
    assert committed == render_pages()[name], f"regenerate it: {REPO}$ {REGENERATE}"


@pytest.mark.parametrize(
    ("family", "owner"),
    [
        ("rag_review_verdicts_total", "review"),
        ("rag_faithfulness_precision_info", "faithfulness"),
        ("rag_judge_requests_total", "faithfulness"),
        ("rag_judge_tokens_total", "faithfulness"),
        ("rag_judge_cost_usd_total", "faithfulness"),
        ("rag_judge_claims_total", "faithfulness"),
        ("rag_judge_claims_cut_total", "faithfulness"),
    ],
    ids=str,
)
def test_metrics_reference_lists_families_declared_once_running(family: str, owner: str) -> None:
    """Families a component declares only once it runs (the review page started, the HHEM
    model loaded, an LLM judge configured) are listed, under the detector declaring them."""
    assert metric_families()[family] == [owner]


def _enabled(model: type[BaseModel]) -> dict[str, Any]:
    """A section with its ``enabled`` key, and its subsections', set to true."""
    settings: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        kind = field.annotation
        if name == "enabled" and kind is bool:
            settings[name] = True
        elif isinstance(kind, type) and issubclass(kind, BaseModel):
            settings[name] = _enabled(kind)
    return settings


def _choices(
    model: type[BaseModel], path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """Each key of a section or subsection that picks a mode (a Literal, a boolean) with
    each of its values."""
    found = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if get_origin(kind) is Literal:
            found += [((*path, name), value) for value in get_args(kind)]
        elif kind is bool:
            found += [((*path, name), value) for value in (False, True)]
        elif isinstance(kind, type) and issubclass(kind, BaseModel):
            found += _choices(kind, (*path, name))
    return found


def _with(settings: dict[str, Any], path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    return {**settings, head: _with(settings.get(head, {}), tuple(rest), value)}


def _valid(settings: dict[str, Any]) -> bool:
    try:
        Config.model_validate(settings)
    except ValueError:
        return False
    return True


def _every_mode() -> list[dict[str, Any]]:
    """Every detector on, Kafka and an LLM judge configured; then the same with each mode
    key of each detector (judge_location, judge, backend, online, ...) at each value. A
    value that needs another one (drift's online: true needs backend: alibi) is taken with
    the first choice of its section that makes it valid."""
    components = [c for c in load_components() if c.config_model.model_fields]
    detectors = {c.name: _enabled(c.config_model) for c in components}
    detectors["slices"]["intents"] = ["billing"]
    detectors["faithfulness"]["llm_judge"] = {
        "endpoint": "http://127.0.0.1:9/v1",
        "model": "m",
        # judge: cascade needs a price and a budget
        "input_usd_per_1m_tokens": 1.0,
        "output_usd_per_1m_tokens": 1.0,
    }
    detectors["faithfulness"]["cascade"] = {"usd_per_hour": 1.0}
    base = {"collectors": {"kafka": {"bootstrap_servers": "kafka:9092"}}, "detectors": detectors}
    modes = [base]
    for component in components:
        choices = [
            (("detectors", component.name, *p), v) for p, v in _choices(component.config_model)
        ]
        for path, value in choices:
            mode = _with(base, path, value)
            if not _valid(mode):
                others = [other for other in choices if other[0] != path]
                mode = next((both for o in others if _valid(both := _with(mode, *o))), mode)
            assert _valid(mode), f"no valid configuration sets {'.'.join(path)}: {value}"
            if mode not in modes:
                modes.append(mode)
    return modes


def test_metrics_reference_lists_every_family_of_every_role() -> None:
    """Every family the sidecar (every detector on, in each mode) or a command serving its
    own /metrics (the scorer) declares is on the metrics reference."""
    declared = set().union(*(role_families(settings) for settings in _every_mode()))
    assert sorted(declared - set(metric_families())) == []


def test_every_key_is_listed_under_its_own_section() -> None:
    """The configuration page puts each key in the table of the section it belongs to."""
    page = configuration_page()
    sections = {m.group(1): m.start() for m in re.finditer(r"^#+ `([^`]+)`$", page, re.M)}
    starts = sorted(sections.values())
    for key in config_keys():
        if key.section:
            continue
        parent, _, name = key.path.rpartition(".")
        start = sections[parent]
        end = next((s for s in starts if s > start), len(page))
        assert f"\n| `{name}` |" in page[start:end], key.path


def test_detectors_index_lists_every_registered_detector() -> None:
    """The detectors index has a row, with a link, for each registered detector component."""
    index = (DOCS / "pages" / "detectors" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[(\w+)\]\(", index, re.M))
    assert sorted({c.name for c in load_components()} - listed) == []


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("html", "shown"),
    [
        ("<td><code>a \\| b</code></td>", "<td><code>a | b</code></td>"),
        ("<td>a \\| b</td>", "<td>a \\| b</td>"),
        ("<p><code>a \\| b</code></p>", "<p><code>a \\| b</code></p>"),
    ],
    ids=["code-in-cell", "text-in-cell", "code-outside-a-table"],
)
def test_escaped_pipe_in_a_table_cell_shows_as_on_github(html: str, shown: str) -> None:
    """The site's hook drops the backslash of a pipe escaped inside code in a table cell only."""
    assert _hooks().on_page_content(html) == shown  # type: ignore[attr-defined]


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site built with --strict (a broken link or anchor fails it) into a tmp dir."""
    pytest.importorskip("mkdocs", reason="install the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    build = ["build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "--site-dir", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", *build],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no end-of-life banner
    )
    assert result.returncode == 0, result.stderr
    return out


def test_every_alert_runbook_anchor_exists_in_the_built_site(site: Path) -> None:
    """Each generated alert's runbook link names the built Alerts page and one of its ids."""
    rules = yaml.safe_load(render_rules(Config()))
    links = {
        rule["alert"]: rule["annotations"]["runbook"]
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert links
    for alert, link in sorted(links.items()):
        url = urlsplit(link)
        page = site / url.path.strip("/") / "index.html"
        assert page.is_file(), f"{alert}: {link} names no page of the site"
        ids = _Ids()
        ids.feed(page.read_text(encoding="utf-8"))
        assert url.fragment == alert.lower(), link
        assert url.fragment in ids.ids, f"{alert}: no #{url.fragment} on {url.path}"
