"""The drift detector's commands: ``rag-monitor report drift``, ``drift set-reference`` and
``drift references``.

Registered under ``rag_monitor.commands`` (the project's pyproject); the report and the
reference store are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.contract.command import Command

if TYPE_CHECKING:
    from monitor.contract.config import Config


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="7d")
    parser.add_argument("--out", type=Path, default=Path("report.html"), help=".html or .md")
    parser.add_argument(
        "--prometheus",
        help="Prometheus URL: recall@k and the false-exclusion ratio before and after each "
        "representation change",
    )


def _report(args: argparse.Namespace, config: Config) -> int:
    from detectors.drift.report import write_report
    from monitor.contract.extras import require_extra

    try:
        require_extra("report", "drawing the report's figures")
        report = write_report(config, args.since, args.out, prometheus=args.prometheus)
    except (ValueError, OSError) as exc:
        print(f"rag-monitor report drift: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {report.verdict} ({len(report.tests)} tests since {args.since})")
    return 0


def _set_reference_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", type=Path, help=".npy array or JSON lines of vectors")
    source.add_argument("--from-window", choices=["latest"], help="the last tested window")
    source.add_argument("--since", help="vectors sampled from tests in this period, e.g. 2d")
    source.add_argument(
        "--snapshot", type=int, help="a stored reference's id (see `drift references`)"
    )
    parser.add_argument(
        "--representation",
        help="the embedding model of the vectors (default: the embedder's, the window's, the "
        "latest test's, or unknown)",
    )


def _set_reference(args: argparse.Namespace, config: Config) -> int:
    from detectors.drift.reference import set_reference

    try:
        reference_id, size = set_reference(
            config.detectors.drift,
            config.service.state_dir,
            from_window=args.from_window,
            since=args.since,
            file=args.file,
            snapshot=args.snapshot,
            representation=args.representation,
        )
    except (ValueError, OSError) as exc:
        print(f"rag-monitor drift set-reference: {exc}", file=sys.stderr)
        return 1
    print(f"reference {reference_id}: {size} vectors, active from the next test")
    return 0


def _references(args: argparse.Namespace, config: Config) -> int:
    from datetime import UTC, datetime

    from detectors.drift.reference import list_references

    del args
    try:
        references = list_references(config.service.state_dir)
    except (ValueError, OSError) as exc:
        print(f"rag-monitor drift references: {exc}", file=sys.stderr)
        return 1
    print("id\tcreated\trepresentation\tvectors\tdim\tactive\tsource")
    for r in references:
        created = datetime.fromtimestamp(r.created, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        active = "active" if r.active else "-"
        print(f"{r.id}\t{created}\t{r.representation}\t{r.size}\t{r.dim}\t{active}\t{r.source}")
    return 0


REPORT_DRIFT = Command(
    ("report", "drift"), "write the weekly drift report", _report_arguments, _report
)
SET_REFERENCE = Command(
    ("drift", "set-reference"),
    "replace the drift reference from the state or a file",
    _set_reference_arguments,
    _set_reference,
)
REFERENCES = Command(
    ("drift", "references"),
    "list the stored drift references (versions per representation)",
    lambda parser: None,
    _references,
)
