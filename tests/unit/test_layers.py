"""Imports go one way: the core imports no component; components import only the core's
contract (``monitor.contract``), never its runtime (``monitor.runtime``), and the contract
imports nothing of the runtime; the demo, an application on top, imports the core and the
rules ``alerts`` generates. Modules and functions stay small, and every metric name is
spelled once, in a names.py."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("monitor", "collectors", "detectors", "alerts", "demo")
# What a package may import beside itself and the core: the demo's live view evaluates the
# rules ``rag-monitor rules`` generates (``alerts.rules.build_rules``), never its own copy.
# The collectors' packages stand on one another in one order: spans (the span model and
# the mapping), then otlp (decoding and the intake step), then kafka and inspect; the
# collectors' metric names are one module beside them.
MAY_ALSO_IMPORT = {
    "demo": ("alerts",),
    "collectors": ("collectors.names",),
    "collectors.spans": (),
    "collectors.otlp": ("collectors.spans", "collectors.names"),
    "collectors.kafka": ("collectors.otlp", "collectors.spans", "collectors.names"),
    "collectors.inspect": ("collectors.otlp", "collectors.spans"),
}


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every absolute module a file imports, at any depth (inside functions too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def _owner(path: Path) -> str:
    """``monitor.contract``, ``monitor.runtime``, ``monitor`` (its two entry modules),
    ``alerts``, ``demo``, ``detectors.<name>`` for a detector package, ``collectors.<name>``
    for a collector package, ``collectors`` for a module beside them."""
    parts = path.relative_to(ROOT).parts
    if parts[0] in ("detectors", "collectors", "monitor") and len(parts) > 2:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# The owners that are components: the collectors, each detector, and the tests' components
# of other packages (``THIRD_PARTY``).
COMPONENTS = ("detectors.", "collectors", "third_party")


def _allowed(owner: str, module: str) -> bool:
    top = module.split(".", maxsplit=1)[0]
    if top not in PACKAGES:
        return True  # the standard library and third-party packages
    if top == "monitor":
        # The contract stands below the runtime; a component sees only the contract.
        if owner == "monitor.contract" or owner.startswith(COMPONENTS):
            return _within(module, "monitor.contract")
        return True
    if owner == "third_party":
        return False  # nothing of the repository but the contract
    if owner.startswith(COMPONENTS):
        # A module beside the collectors' packages (owner ``collectors``) is no package.
        own = () if owner == "collectors" else (owner,)
        return any(_within(module, within) for within in (*own, *MAY_ALSO_IMPORT.get(owner, ())))
    return top == owner or top in MAY_ALSO_IMPORT.get(owner, ())


# The tests' third-party components, installed from outside the repository: they too may
# import only the contract.
THIRD_PARTY = ("tests/testdata/toy_collector", "tests/testdata/toy_detector")


def _violations() -> list[str]:
    owned = [
        (_owner(path), path) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    ]
    owned += [
        ("third_party", path) for folder in THIRD_PARTY for path in (ROOT / folder).rglob("*.py")
    ]
    return [
        f"{path.relative_to(ROOT)}:{line}: {owner} imports {module}"
        for owner, path in sorted(owned, key=lambda item: item[1])
        for line, module in _imports(path)
        if not _allowed(owner, module)
    ]


def test_imports_follow_the_layers() -> None:
    """monitor imports no component nor the demo, and its contract nothing of its runtime;
    collectors, each detector and the tests' third-party components import only the
    contract; alerts imports only the core; the demo imports the core and alerts; within
    collectors, spans, otlp and then kafka and inspect stand on one another in that order."""
    assert _violations() == []


@pytest.mark.parametrize(
    ("owner", "module", "allowed"),
    [
        ("monitor", "collectors.spans.assembly", False),
        ("monitor", "detectors.drift.report", False),
        ("monitor", "alerts.rules", False),
        ("collectors", "monitor.contract.work_items", True),
        ("collectors", "monitor.runtime.pipeline", False),
        ("detectors.cost", "monitor.runtime.config_loading", False),
        ("detectors.cost", "monitor", False),
        ("monitor.contract", "monitor.runtime.sidecar", False),
        ("monitor.contract", "monitor.contract.trace", True),
        ("monitor.runtime", "monitor.contract.trace", True),
        ("monitor.runtime", "collectors.spans", False),
        ("monitor", "monitor.runtime.cli", True),
        ("third_party", "monitor.contract.components", True),
        ("third_party", "monitor.runtime.sidecar", False),
        ("third_party", "collectors.otlp.export_decoding", False),
        ("collectors", "detectors.cost", False),
        ("detectors.cost", "monitor.contract.trace", True),
        ("detectors.cost", "detectors.cost.config", True),
        ("detectors.cost", "detectors.latency.config", False),
        ("detectors.cost", "detectors", False),
        ("detectors.cost", "collectors.kafka.records", False),
        ("alerts", "monitor.contract.components", True),
        ("alerts", "detectors.drift.alerting", False),
        ("alerts", "demo.run", False),
        ("monitor", "demo.command", False),
        ("collectors", "demo.service", False),
        ("detectors.cost", "alerts.rules", False),
        ("demo", "monitor.runtime.sidecar", True),
        ("demo", "alerts.rules", True),
        ("demo", "detectors.drift.config", False),
        ("demo", "collectors.otlp.http", False),
        ("collectors.spans", "collectors.otlp.decode", False),
        ("collectors.spans", "collectors.spans.span", True),
        ("collectors.otlp", "collectors.spans.span", True),
        ("collectors.otlp", "collectors.kafka.records", False),
        ("collectors.kafka", "collectors.otlp.export_decoding", True),
        ("collectors.kafka", "collectors.inspect.command", False),
        ("collectors.inspect", "collectors.spans.openinference", True),
        ("collectors.otlp", "collectors.inspect.view", False),
        ("collectors", "collectors.otlp.http", False),
    ],
    ids=str,
)
def test_the_rule_itself(owner: str, module: str, allowed: bool) -> None:
    """The rule refuses each kind of import the layering forbids and allows the core."""
    assert _allowed(owner, module) is allowed


def _sections_read(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The ``detectors:`` keys code reads: ``<x>.detectors.<key>`` and
    ``getattr(<x>.detectors, "<key>")``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "detectors":
                yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) > 1
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "detectors"
            and isinstance(node.args[1], ast.Constant)
        ):
            yield node.lineno, str(node.args[1].value)


def test_a_detector_reads_no_siblings_section() -> None:
    """No detector package reads another detector's config section: what one needs from
    another is provided through the core (monitor.contract.shared, BuildContext.shared)."""
    found = []
    for package in sorted(path for path in (ROOT / "detectors").iterdir() if path.is_dir()):
        for path in sorted(package.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for line, key in _sections_read(tree):
                if key != package.name:
                    found.append(f"{path.relative_to(ROOT)}:{line}: reads detectors.{key}")
    assert found == []


def test_the_section_check_finds_both_spellings() -> None:
    """The check above sees a sibling's section read as an attribute and through getattr."""
    source = "a = config.detectors.review\nb = getattr(root.detectors, 'evaluations', None)\n"
    assert list(_sections_read(ast.parse(source))) == [(1, "review"), (2, "evaluations")]


def test_modules_and_functions_stay_small() -> None:
    """Every source module is under 400 lines and every function under 80."""
    too_long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            name = path.relative_to(ROOT)
            if text.count("\n") >= 400:
                too_long.append(f"{name}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length >= 80:
                        too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


PROSE_KEYWORDS = ("description", "help", "hint", "note")


def _code_strings(source: str) -> Iterator[tuple[int, str]]:
    """Every string literal of ``source`` (f-strings' fixed parts too) but its prose, which
    may name a metric: docstrings, ``description=`` / ``help=`` texts, log lines'
    ``hint=`` / ``note=`` and the messages of raised errors."""
    tree = ast.parse(source)
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                prose.add(id(first.value))
        elif isinstance(node, ast.keyword) and node.arg in PROSE_KEYWORDS:
            prose.update(id(part) for part in ast.walk(node.value))
        elif isinstance(node, ast.Raise) and node.exc is not None:
            prose.update(id(part) for part in ast.walk(node.exc))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node.lineno, node.value


# A metric family's name as a names.py spells it; recording rules (``rag:...``) and
# selectors (``name{label="value"}``) are not families.
FAMILY = re.compile(r"rag_[a-z0-9_]+")
# What prometheus_client appends to a family's name on its samples.
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_info")


def _names_modules() -> list[Path]:
    """Every ``names.py`` of the packages: the core's, the collectors', each detector's."""
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("names.py"))]


def _spelled_names(path: Path) -> set[str]:
    """The metric family names a ``names.py`` spells as module-level string constants."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        text = value.value if isinstance(value, ast.Constant) else None
        if isinstance(text, str) and FAMILY.fullmatch(text):
            found.add(text)
    return found


def _metric_names() -> set[str]:
    return {name for path in _names_modules() for name in _spelled_names(path)}


def _name_pattern(spelled: set[str]) -> re.Pattern[str]:
    """Any of the ``spelled`` names, a counter with or without ``_total``, a histogram's
    samples with their suffix."""
    bases = sorted({name.removesuffix("_total") for name in spelled}, key=len, reverse=True)
    suffixes = "|".join(SUFFIXES)
    return re.compile(rf"(?<![\w:])(?:{'|'.join(map(re.escape, bases))})(?:{suffixes})?(?!\w)")


def _spellings(source: str) -> list[tuple[int, str]]:
    pattern = _name_pattern(_metric_names())
    return [
        (line, found[0]) for line, text in _code_strings(source) if (found := pattern.search(text))
    ]


def test_metric_names_are_spelled_only_in_names_modules() -> None:
    """No module but a names.py (the core's, the collectors', a detector's) spells a metric
    family name in code (prose may name it): one spelling that the metrics, the rules, the
    panels and the backtest's simulated series all import."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "names.py":
                for line, name in _spellings(path.read_text(encoding="utf-8")):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert found == []


def test_every_declared_family_is_spelled_in_a_names_module() -> None:
    """Every family the metrics reference lists (the sidecar with every detector on, and
    the families components declare only once they run) is spelled in a names.py, so the
    check above sees it."""
    from alerts.reference import metric_families

    assert sorted(set(metric_families()) - _metric_names()) == []


def test_each_metric_name_is_spelled_once() -> None:
    """No two names.py files spell the same family: a name read by another component is
    the core's (monitor/contract/names.py)."""
    owners: dict[str, list[str]] = {}
    for path in _names_modules():
        for name in _spelled_names(path):
            owners.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in owners.items() if len(paths) > 1} == {}


@pytest.mark.parametrize(
    ("source", "spelled"),
    [
        ('METRIC = "rag_requests_total"\n', [(1, "rag_requests_total")]),
        ('Counter("rag_monitor_records", "help")\n', [(1, "rag_monitor_records")]),
        ("q = f'sum(rag_monitor_queue_depth{{{JOB}}})'\n", [(1, "rag_monitor_queue_depth")]),
        ('"""Counts rag_requests_total."""\n', []),
        ('Field(1, description="watched by rag_monitor_state_bytes")\n', []),
        ('log.warning("x", hint="counted in rag_monitor_records_total")\n', []),
        ('LOGGER = "rag_monitor.pipeline"\n', []),
        ('OTHER = "rag_requests_total_by_model"\n', []),
        ('RULE = "rag:rag_requests_total:rate5m"\n', []),
        ('Gauge("rag_drift_p_value", "help")\n', [(1, "rag_drift_p_value")]),
        ('q = "sum(rate(rag_retrieval_recall_sum[5m]))"\n', [(1, "rag_retrieval_recall_sum")]),
        ('raise ValueError("not a bound of rag_stage_latency_seconds")\n', []),
        ('COOKIE = "rag_review_session"\n', []),
    ],
    ids=[
        "constant",
        "counter without _total",
        "f-string",
        "docstring",
        "description",
        "log hint",
        "logger name",
        "longer name",
        "recording rule",
        "a detector's name",
        "histogram sample",
        "error message",
        "not a metric",
    ],
)
def test_the_name_check_itself(source: str, spelled: list[tuple[int, str]]) -> None:
    """The check finds a metric name in code and f-strings, not in prose or other names."""
    assert _spellings(source) == spelled
