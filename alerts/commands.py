"""``rag-monitor rules``, ``dashboard`` and ``docs reference``, registered in the
entry-point group ``rag_monitor.commands`` so that the command line (core) imports nothing
from ``alerts``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from monitor.components import Command


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


def _rules(args: argparse.Namespace, config: Any) -> int:
    from alerts.rules import render_rules

    if args.rules_action == "backtest":
        from alerts.backtest_command import run

        return run(args, config)
    sys.stdout.write(render_rules(config, kubernetes=args.kubernetes))
    return 0


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _dashboard(args: argparse.Namespace, config: Any) -> int:
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


def _docs_reference(args: argparse.Namespace, config: Any) -> int:
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
