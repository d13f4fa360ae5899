"""The ``rag-monitor`` command line. Imports stay inside the verbs so that
``--help`` answers at once: torch, transformers, alibi-detect and phoenix are
loaded only by the detector that needs them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

NOT_AVAILABLE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-monitor",
        description="Online production monitoring sidecar for RAG services.",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--config", type=Path, help="YAML configuration (default: built-in)")
        return sub

    verb("run", "run the sidecar: OTLP receivers, Kafka consumer, /metrics")
    demo = verb("demo", "the sidecar plus a synthetic RAG service with scripted incidents")
    demo.add_argument("--duration", type=float, default=None, help="seconds to run")
    rules = verb("rules", "print the Prometheus recording and alerting rules")
    rules.add_argument(
        "--kubernetes", action="store_true", help="wrap them in a PrometheusRule object"
    )
    verb("dashboard", "print the Grafana dashboard")
    report = verb("report", "write a report (drift)")
    report.add_argument("kind", choices=["drift"])
    report.add_argument("--since", default="7d")
    report.add_argument("--out", type=Path, default=Path("report.html"), help=".html or .md")
    drift = verb("drift", "manage the drift detector's state (set-reference)")
    drift.add_argument("action", choices=["set-reference"])
    source = drift.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", type=Path, help=".npy array or JSON lines of vectors")
    source.add_argument("--from-window", choices=["latest"], help="the last tested window")
    source.add_argument("--since", help="vectors sampled from tests in this period, e.g. 2d")
    check = verbs.add_parser("check-config", help="validate a configuration file and explain it")
    check.add_argument("file", type=Path, nargs="?", help="YAML file (omitted: the defaults)")
    check.add_argument("--explain", action="store_true", help="list every key with its meaning")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verb == "check-config":
        return _check_config(args.file, args.explain)
    from monitor.log import configure_logging

    configure_logging(args.log_level)
    if args.verb == "run":
        return _run(args.config)
    if args.verb == "dashboard":
        return _dashboard(args.config)
    if args.verb == "demo":
        return _demo(args.config, args.duration)
    if args.verb == "rules":
        return _rules(args.config, args.kubernetes)
    if args.verb == "report":
        return _report(args.config, args.since, args.out)
    if args.verb == "drift":
        return _drift_set_reference(args.config, args.file, args.from_window, args.since)
    print(
        f"rag-monitor {args.verb}: not available yet in this version",
        file=sys.stderr,
    )
    return NOT_AVAILABLE


def _load(path: Path | None) -> object:
    from monitor.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"invalid configuration ({exc.source}):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _check_config(path: Path | None, explain_keys: bool) -> int:
    from monitor.config import explain

    config = _load(path)
    if config is None:
        return 1
    print(f"{path or 'defaults'}: valid")
    if explain_keys:
        for line in explain():
            print(f"  {line}")
    return 0


def _rules(path: Path | None, kubernetes: bool) -> int:
    from alerts.rules import render_rules
    from monitor.config import Config

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    sys.stdout.write(render_rules(config, kubernetes=kubernetes))
    return 0


def _run(path: Path | None) -> int:
    from monitor.config import Config
    from monitor.sidecar import Sidecar

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    try:
        sidecar = Sidecar(config)
    except ValueError as exc:  # a setting that only fails when used (e.g. unset token variable)
        print(f"invalid configuration: {exc}", file=sys.stderr)
        return 1
    sidecar.run_until_signal()
    return 0


def _demo(path: Path | None, duration_s: float | None) -> int:
    from monitor.config import Config
    from monitor.demo import run_demo

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    return run_demo(config, duration_s)


def _dashboard(path: Path | None) -> int:
    from alerts.dashboard import render_dashboard
    from monitor.config import Config

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    sys.stdout.write(render_dashboard(config))
    return 0


def _report(path: Path | None, since: str, out: Path) -> int:
    from detectors.drift.report import write_report
    from monitor.config import Config

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    try:
        report = write_report(config, since, out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rag-monitor report drift: {exc}", file=sys.stderr)
        return 1
    print(f"{out}: {report.verdict} ({len(report.tests)} tests since {since})")
    return 0


def _drift_set_reference(
    path: Path | None, file: Path | None, from_window: str | None, since: str | None
) -> int:
    from detectors.drift.reference import set_reference
    from monitor.config import Config

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    try:
        reference_id, size = set_reference(
            config.detectors.drift,
            config.service.state_dir,
            from_window=from_window,
            since=since,
            file=file,
        )
    except (ValueError, OSError) as exc:
        print(f"rag-monitor drift set-reference: {exc}", file=sys.stderr)
        return 1
    print(f"reference {reference_id}: {size} vectors, active from the next test")
    return 0
