"""``rag-monitor rules backtest``: how often would the generated rules have fired?

The rules ``alerts.rules.build_rules`` generates are replayed over a history of the
raw counters they read (a running Prometheus's, or a synthetic world's) with
Prometheus's own engine, in a scratch TSDB: the counters become blocks, the
recording rules are backfilled layer by layer (promtool evaluates a rule against
a running Prometheus, so a rule reading another recorded series waits for the
layer that records it), and each alert's condition is read back with
``query_range`` at the evaluation interval. Only ``for:`` is replayed here, the
way the rule manager does it: an alert fires once its condition has held at every
evaluation for ``for``, and resolves at the first evaluation without it.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from alerts.scratch import (
    BacktestError,
    ScratchPrometheus,
    block_duration,
    find_tools,
    import_openmetrics,
    query_range,
    run_promtool,
)
from monitor.contract.durations import parse_duration

WEEK_S = 7 * 86_400
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
# A word not inside a longer name and not called: a metric, a label or a keyword.
_NAMES = re.compile(r"(?<![\w:])[a-zA-Z_]\w*(?![\w:]|\s*\()")


@dataclass(frozen=True)
class AlertRule:
    name: str
    severity: str
    expr: str
    for_s: float


@dataclass(frozen=True)
class Window:
    """The history replayed: data from ``start``, alerts counted from ``evaluate_from``
    to ``end`` (seconds since the epoch), evaluated every ``step`` seconds."""

    start: float
    evaluate_from: float
    end: float
    step: float

    @property
    def evaluations(self) -> NDArray[np.float64]:
        times: NDArray[np.float64] = np.arange(
            self.evaluate_from, self.end + self.step / 2, self.step
        )
        return times

    @property
    def weeks(self) -> float:
        return (self.end - self.evaluate_from) / WEEK_S


@dataclass
class AlertSummary:
    """One alert (name and severity) over the window: its firing episodes across label
    sets, and at which evaluations any of them was firing."""

    alert: str
    severity: str
    episodes: list[tuple[float, float]]  # (first firing evaluation, seconds), by start
    firing: NDArray[np.bool_]
    step: float

    @property
    def firings(self) -> int:
        return len(self.episodes)

    @property
    def longest_episode_s(self) -> float:
        return max((seconds for _, seconds in self.episodes), default=0.0)

    @property
    def seconds_in_alert(self) -> float:
        return float(self.firing.sum()) * self.step

    def first_firing(self, times: NDArray[np.float64], start: float, end: float) -> float | None:
        """Seconds from ``start`` to the first evaluation in [start, end] where it fires."""
        inside = self.firing & (times >= start) & (times <= end)
        hits = np.flatnonzero(inside)
        return None if hits.size == 0 else float(times[hits[0]] - start)


def alert_rules(document: dict[str, Any]) -> list[AlertRule]:
    """Every alerting rule of the rule-file ``document``."""
    return [
        AlertRule(
            rule["alert"],
            rule.get("labels", {}).get("severity", "none"),
            rule["expr"],
            parse_duration(rule.get("for", "0s")),
        )
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def alerts_read(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The recording rules some alert reads, directly or through other recorded series:
    the ones a backtest must backfill (panel-only series are left out)."""
    rules = [rule for group in document["groups"] for rule in group["rules"] if "record" in rule]
    readers = [rule.expr for rule in alert_rules(document)]
    wanted: set[str] = set()
    while True:
        more = {rule["record"] for rule in rules if any(_reads(e, rule["record"]) for e in readers)}
        if more <= wanted:
            return [rule for rule in rules if rule["record"] in wanted]
        wanted |= more
        readers = [rule["expr"] for rule in rules if rule["record"] in wanted]


def recording_layers(document: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The recording rules the alerts read, in dependency layers: layer 0 reads only raw
    series, layer n reads something recorded in layer n-1 (and maybe earlier ones)."""
    rules = alerts_read(document)
    recorded = {rule["record"] for rule in rules}
    reads = {id(rule): {name for name in recorded if _reads(rule["expr"], name)} for rule in rules}
    layer_of: dict[str, int] = {}
    for _ in range(len(rules) + 1):
        changed = False
        for rule in rules:
            depth = 1 + max((layer_of.get(name, -1) for name in reads[id(rule)]), default=-1)
            if depth > layer_of.get(rule["record"], -1):
                layer_of[rule["record"]] = depth
                changed = True
        if not changed:
            break
    else:
        raise BacktestError("the recording rules read each other in a cycle")
    layers: list[list[dict[str, Any]]] = [[] for _ in range(1 + max(layer_of.values(), default=-1))]
    for rule in rules:
        layers[layer_of[rule["record"]]].append(rule)
    return layers


def _reads(expr: str, name: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr) is not None


def raw_names(document: dict[str, Any]) -> set[str]:
    """Words of the rules' expressions that may be raw metric names (label names and
    PromQL keywords too: the caller keeps those a Prometheus knows as metrics)."""
    exprs = [rule["expr"] for group in document["groups"] for rule in group["rules"]]
    return {name for expr in exprs for name in _NAMES.findall(_STRINGS.sub('""', expr))}


def backfill(
    promtool: str, server: ScratchPrometheus, document: dict[str, Any], window: Window
) -> None:
    """Record every recording rule over the window into the scratch TSDB, one dependency
    layer after the other.

    A group evaluates at an offset into its interval hashed from its name and file
    path (as Prometheus spreads groups): relative paths keep the offsets, and so every
    result, the same on every run."""
    for number, layer in enumerate(recording_layers(document)):
        rules = f"layer{number}.yaml"
        group = {"name": f"layer{number}", "rules": [nameless(rule) for rule in layer]}
        (server.directory / rules).write_text(yaml.safe_dump({"groups": [group]}))
        staging = f"layer{number}"
        run_promtool(
            promtool, "tsdb", "create-blocks-from", "rules", "--quiet",
            f"--url={server.url}", f"--start={int(window.start)}", f"--end={int(window.end)}",
            f"--eval-interval={int(window.step)}s",
            f"--max-block-duration={block_duration(window.step)}",
            f"--output-dir={staging}", rules, cwd=server.directory,
        )  # fmt: skip
        server.add_blocks(server.directory / staging)


def nameless(rule: dict[str, Any]) -> dict[str, Any]:
    """The recording rule with the same values but no metric name on its result.

    ``a:recorded or sum(...)`` returns the recorded series under its own name at some
    evaluations and a nameless one at others. Prometheus renames every result to the
    rule's ``record``, but promtool backfills the two query_range series one after the
    other under that one name and fails ("out of order sample"). ``+ 0`` drops the name
    and changes no value (NaN and infinities included), so they come back as one series.
    """
    return {**rule, "expr": f"({rule['expr']}) + 0"}


def firing_steps(present: NDArray[np.bool_], for_steps: int) -> NDArray[np.bool_]:
    """Evaluations at which the alert fires: its condition has held at this one and the
    ``for_steps`` before it (the rule manager's ``for``)."""
    held = np.cumsum(present)
    last_reset = np.maximum.accumulate(np.where(present, 0, held))
    run_length = held - last_reset
    firing: NDArray[np.bool_] = run_length >= for_steps + 1
    return firing


def episodes(firing: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(first evaluation, evaluations) of each run of firing evaluations."""
    edges = np.diff(np.concatenate([[0], firing.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(start), int(stop - start)) for start, stop in zip(starts, stops, strict=True)]


def replay(url: str, rules: Sequence[AlertRule], window: Window) -> AlertSummary:
    """Replay the alerting rules of one (alert, severity): their ``for`` included, counted
    from ``window.evaluate_from``."""
    times = window.evaluations
    firing_by_labels: dict[frozenset[tuple[str, str]], NDArray[np.bool_]] = {}
    for rule in rules:
        for_steps = int(np.ceil(rule.for_s / window.step))
        first = window.evaluate_from - for_steps * window.step
        grid = len(times) + for_steps
        for labels, points in query_range(url, rule.expr, first, window.end, window.step).items():
            present = np.zeros(grid, dtype=bool)
            index = np.rint((np.array([t for t, _ in points]) - first) / window.step).astype(int)
            present[index[(index >= 0) & (index < grid)]] = True
            fired = firing_steps(present, for_steps)[for_steps:]
            before = firing_by_labels.get(labels, np.zeros(len(times), dtype=bool))
            firing_by_labels[labels] = before | fired
    runs = sorted(
        (float(times[start]), length * window.step)
        for fired in firing_by_labels.values()
        for start, length in episodes(fired)
    )
    union = np.zeros(len(times), dtype=bool)
    for fired in firing_by_labels.values():
        union |= fired
    return AlertSummary(rules[0].name, rules[0].severity, runs, union, window.step)


def run_backtest(
    document: dict[str, Any], write_counters: Callable[[Path], None], window: Window
) -> list[AlertSummary]:
    """Replay ``document`` over the counters ``write_counters`` writes (an OpenMetrics
    file at the path it is given) in a scratch Prometheus; one summary per alert and
    severity, in rule order."""
    promtool, prometheus = find_tools()
    by_alert: dict[tuple[str, str], list[AlertRule]] = {}
    for rule in alert_rules(document):
        by_alert.setdefault((rule.name, rule.severity), []).append(rule)
    with tempfile.TemporaryDirectory(prefix="rag-monitor-backtest-") as work:
        counters = Path(work) / "counters.txt"
        write_counters(counters)
        server = ScratchPrometheus(prometheus, Path(work))
        import_openmetrics(promtool, counters, server.data)
        counters.unlink()
        with server:
            backfill(promtool, server, document, window)
            return [replay(server.url, rules, window) for rules in by_alert.values()]
