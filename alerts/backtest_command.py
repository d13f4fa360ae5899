"""The command line of ``rag-monitor rules backtest``: where the history comes from
(``--prometheus URL --since 28d`` or ``--simulate``), and the report (a table, or
``--json``)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alerts.field_coverage import COVERAGE
from monitor.contract.components import load_components
from monitor.contract.config import Config
from monitor.contract.durations import parse_duration

if TYPE_CHECKING:  # numpy and the rest load only when a backtest runs: --help stays fast
    from alerts.backtest import AlertSummary, Window
    from monitor.contract.rulekit.simulation import Incident, World

# The fields the coverage ticket watches: field=~"answer|contexts|..." in its recordings.
_FIELDS = re.compile(r'field=~"([\w|]+)"')


def incident_kinds() -> tuple[str, ...]:
    """Every kind ``--incident`` takes: the detectors' (in their order), then the core's."""
    return (*(kind for component in load_components() for kind in component.incidents), COVERAGE)


def parse_incident(spec: str) -> Incident:
    """``--incident``'s value, of the kinds the registered detectors and the core react to."""
    from monitor.contract.rulekit.simulation import Incident

    return Incident.parse(spec, incident_kinds())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="replay this Prometheus's history")
    source.add_argument("--simulate", action="store_true", help="replay a synthetic world")
    parser.add_argument(
        "--since", default="28d", help="with --prometheus: history read, ending at --end (28d)"
    )
    parser.add_argument(
        "--end",
        type=_timestamp,
        default=None,
        help="with --prometheus: end of the history, RFC 3339 or Unix seconds (now)",
    )
    parser.add_argument(
        "--warm-up", default="7d", help="history before the counted part: baselines fill (7d)"
    )
    parser.add_argument("--evaluate", default="14d", help="with --simulate: counted part (14d)")
    parser.add_argument(
        "--requests-per-day", type=float, default=272_000, help="with --simulate: traffic"
    )
    parser.add_argument(
        "--incident",
        action="append",
        default=[],
        metavar="KIND:START:DURATION",
        help="with --simulate: an incident of the kinds the detectors simulate "
        f"({', '.join(incident_kinds())}) or all (every degradation; a change such as "
        "judge_change only by name; comma-separated), from START "
        "after the world's start (a Monday 00:00 UTC), e.g. all:8d14h:6h; repeatable",
    )
    parser.add_argument("--seed", type=int, default=0, help="with --simulate: the world's seed")
    parser.add_argument(
        "--reviews-per-week",
        type=_non_negative,
        default=None,
        help="with --simulate: random-stratum reviews people complete a week, per judge (50)",
    )
    parser.add_argument(
        "--judge-bias",
        type=_bias,
        default=None,
        help="with --simulate: how much higher each judge's pass share reads than the "
        "reviewers' (0: an honest judge; negative: lower)",
    )
    parser.add_argument(
        "--eval-interval",
        default=None,
        help="rule evaluation interval (guardrails.evaluation_interval, as the rules assume)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace, config: Config) -> int:
    from alerts.backtest import Window, run_backtest
    from alerts.rules import build_rules
    from alerts.scratch import BacktestError
    from alerts.simulate import simulate, write_openmetrics

    document = build_rules(config)
    try:
        interval = args.eval_interval or getattr(config.guardrails, "evaluation_interval", "1m")
        step = parse_duration(interval)
        warm_up = parse_duration(args.warm_up)
        if args.simulate:
            world = simulated_world(args, config, warm_up)
            fields = watched_fields(document)
            window = Window(
                world.start_s,
                world.start_s + warm_up,
                world.start_s + world.duration_s - step,
                step,
            )
            summaries = run_backtest(
                document,
                lambda path: write_openmetrics(simulate(world, config, fields), path),
                window,
            )
            incidents: Sequence[Incident] = world.incidents
            origin = float(world.start_s)
        else:
            end = step * ((time.time() if args.end is None else args.end) // step)
            start = end - parse_duration(args.since)
            if warm_up >= end - start:
                raise BacktestError(
                    f"--warm-up {args.warm_up} leaves nothing of --since {args.since}"
                )
            window = Window(start, start + warm_up, end, step)
            url = args.prometheus.rstrip("/")
            summaries = run_backtest(
                document, lambda path: read_counters(url, document, window, path), window
            )
            incidents, origin = (), start
    except (BacktestError, ValueError) as error:
        print(f"rag-monitor rules backtest: {error}", file=sys.stderr)
        return 2
    report = build_report(summaries, window, incidents, origin)
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if args.json else render_table(report))
    return 0


def simulated_world(args: argparse.Namespace, config: Config, warm_up: float) -> World:
    """The world of the command line; each detector simulates its series as ``config``
    configures it."""
    from alerts.scratch import BacktestError
    from monitor.contract.rulekit.simulation import World

    duration_s = warm_up + parse_duration(args.evaluate)
    incidents = [parse_incident(spec) for spec in args.incident]
    for incident in incidents:
        if not warm_up <= incident.start_s < duration_s:
            raise BacktestError(
                f"incident {incident.spec} starts outside the counted part of the world "
                f"(from {args.warm_up} to {args.warm_up} + {args.evaluate} after its start)"
            )
    reviewed = {
        name: value
        for name, value in (
            ("reviews_per_week", args.reviews_per_week),
            ("judge_bias", args.judge_bias),
        )
        if value is not None
    }
    return World(
        requests_per_day=args.requests_per_day,
        duration_s=duration_s,
        incidents=incidents,
        seed=args.seed,
        job=config.guardrails.job,
        **reviewed,
    )


def watched_fields(document: dict[str, Any]) -> tuple[str, ...]:
    """The fields the coverage ticket's rules watch, as the simulator writes them."""
    exprs = " ".join(rule["expr"] for group in document["groups"] for rule in group["rules"])
    return tuple(sorted({f for found in _FIELDS.findall(exprs) for f in found.split("|")}))


def read_counters(url: str, document: dict[str, Any], window: Window, path: Path) -> None:
    """The raw series the rules read, from the Prometheus at ``url`` over the window at its
    step, as an OpenMetrics file."""
    from alerts.backtest import raw_names
    from alerts.scratch import BacktestError, api_get, query_range, write_openmetrics_series

    known = set(api_get(url, "/api/v1/label/__name__/values"))
    names = sorted(raw_names(document) & known)
    if not names:
        raise BacktestError(f"{url} holds none of the series the rules read")
    with path.open("w") as out:
        for name in names:
            selector = f'{{__name__="{name}"}}'
            for labels, points in query_range(
                url, selector, window.start, window.end, window.step
            ).items():
                own = {key: value for key, value in labels if key != "__name__"}
                times = [f"{t:.3f}" for t, _ in points]
                write_openmetrics_series(out, name, own, times, [v for _, v in points])
        out.write("# EOF\n")


def build_report(
    summaries: Sequence[AlertSummary], window: Window, incidents: Sequence[Incident], origin: float
) -> dict[str, Any]:
    """Per alert: firings a week, time in alert, longest episode; per incident: minutes
    from its start to each alert's first firing (null: none before it ended)."""
    times = window.evaluations
    return {
        "from": _utc(window.evaluate_from),
        "to": _utc(window.end),
        "weeks": round(window.weeks, 3),
        "eval_interval_s": window.step,
        "alerts": [
            {
                "alert": s.alert,
                "severity": s.severity,
                "firings": s.firings,
                "firings_per_week": round(s.firings / window.weeks, 2),
                "hours_in_alert": round(s.seconds_in_alert / 3600, 2),
                "longest_episode_minutes": round(s.longest_episode_s / 60, 1),
                "episodes": [
                    {"start": _utc(start), "minutes": round(seconds / 60, 1)}
                    for start, seconds in s.episodes
                ],
            }
            for s in summaries
        ],
        "incidents": [
            {
                "incident": incident.spec,
                "starts": _utc(origin + incident.start_s),
                "minutes_to_fire": {
                    f"{s.alert} {s.severity}": _minutes(
                        s.first_firing(
                            times,
                            origin + incident.start_s,
                            origin + incident.start_s + incident.duration_s,
                        )
                    )
                    for s in summaries
                },
            }
            for incident in incidents
        ],
    }


def render_table(report: dict[str, Any]) -> str:
    lines = [
        f"Backtest {report['from']} .. {report['to']} ({report['weeks']:g} weeks, "
        f"evaluated every {report['eval_interval_s']:g} s)",
        "",
        f"{'alert':<36} {'severity':<8} {'firings/week':>12} {'hours in alert':>14} "
        f"{'longest (min)':>13}",
    ]
    for row in report["alerts"]:
        lines.append(
            f"{row['alert']:<36} {row['severity']:<8} {row['firings_per_week']:>12.2f} "
            f"{row['hours_in_alert']:>14.2f} {row['longest_episode_minutes']:>13.1f}"
        )
    for incident in report["incidents"]:
        lines += ["", f"Incident {incident['incident']} from {incident['starts']}: minutes to fire"]
        for alert, minutes in incident["minutes_to_fire"].items():
            lines.append(f"  {alert:<44} {'-' if minutes is None else f'{minutes:g}':>8}")
    return "\n".join(lines) + "\n"


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 1)


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of 0 or more")
    return value


def _bias(text: str) -> float:
    value = float(text)
    if not -1 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a share between -1 and 1")
    return value


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: RFC 3339 or Unix seconds") from error
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
