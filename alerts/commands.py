"""``rag-monitor rules``, ``dashboard``, ``docs reference`` and ``report guardrails``,
registered in the entry-point group ``rag_monitor.commands`` so that the command line (core)
imports nothing from ``alerts``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.contract.command import Command

if TYPE_CHECKING:
    from monitor.contract.config import Config


def _rules_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubernetes", action="store_true", help="wrap them in a PrometheusRule object"
    )
    # ``rules backtest``: an optional action, so plain ``rules`` still prints them.
    actions = parser.add_subparsers(dest="rules_action", metavar="ACTION")
    text = "replay the rules over a Prometheus's history or a simulated world"
    backtest = actions.add_parser("backtest", help=text, description=text)
    # SUPPRESS: an absent --config here must not hide one given before ``backtest``.
    backtest.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="YAML configuration"
    )
    from alerts.backtest_command import add_arguments

    add_arguments(backtest)


def _rules(args: argparse.Namespace, config: Config) -> int:
    from alerts.rules import render_rules

    if args.rules_action == "backtest":
        from alerts.backtest_command import run

        return run(args, config)
    sys.stdout.write(render_rules(config, kubernetes=args.kubernetes))
    return 0


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _dashboard(args: argparse.Namespace, config: Config) -> int:
    from alerts.dashboard import render_dashboard

    sys.stdout.write(render_dashboard(config))
    return 0


RULES = Command(
    ("rules",), "print the Prometheus recording and alerting rules", _rules_arguments, _rules
)
DASHBOARD = Command(("dashboard",), "print the Grafana dashboard", _no_arguments, _dashboard)


def _docs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder of the generated pages: docs/pages/reference in this repository",
    )


def _docs_reference(args: argparse.Namespace, config: Config) -> int:
    from alerts.reference import write_pages

    for path in write_pages(args.out):
        print(path)
    return 0


DOCS_REFERENCE = Command(
    ("docs", "reference"),
    "write the docs site's generated reference pages (configuration keys, metrics, command "
    "line) from the built-in defaults and the installed components; --config is not read",
    _docs_arguments,
    _docs_reference,
)


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", metavar="URL", required=True, help="the Prometheus the rules run in"
    )
    parser.add_argument("--since", default="7d", help="the period, up to --until (e.g. 7d)")
    parser.add_argument(
        "--until",
        type=float,
        metavar="EPOCH_S",
        help="end of the period in seconds since the epoch (default: now)",
    )
    parser.add_argument("--out", type=Path, default=Path("guardrails.html"), help=".html or .md")


def _report(args: argparse.Namespace, config: Config) -> int:
    from alerts.guardrail_report import summary, write_report
    from monitor.contract.extras import require_extra

    try:
        require_extra("report", "drawing the report's figures")
        report = write_report(config, args.prometheus, args.out, args.since, args.until)
    except (ValueError, OSError) as exc:
        print(f"rag-monitor report guardrails: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {summary(report)}")
    return 0


REPORT_GUARDRAILS = Command(
    ("report", "guardrails"),
    "write the weekly guardrail review from Prometheus: each guardrail over the period with "
    "its alerts and releases, the worst slices, coverage, review and field coverage",
    _report_arguments,
    _report,
)
