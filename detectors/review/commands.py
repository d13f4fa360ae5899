"""The review loop's commands: ``rag-monitor review export-golden`` and ``report review``.

Both read the review store in ``service.state_dir``; they never create one. The store
and the statistics are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from detectors.review.model import Progress, ReviewItem, Verdict
from monitor.contract.command import Command

if TYPE_CHECKING:
    from monitor.contract.config import Config


def _read_store(config: Config) -> tuple[list[tuple[ReviewItem, Verdict]], Progress]:
    """The reviewed items and the queue's progress; never creates a store."""
    from detectors.review.store import FILE_NAME, ReviewStore

    path = Path(config.service.state_dir) / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no review store at {path} (is review.enabled on?)")
    store = ReviewStore(path.parent)
    try:
        return store.reviewed(), store.progress()
    finally:
        store.close()


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=Path("golden.jsonl"), help="JSON lines, golden-set format"
    )


def _export(args: argparse.Namespace, config: Config) -> int:
    from detectors.review.report import write_golden

    try:
        reviewed, _ = _read_store(config)
        export = write_golden(reviewed, args.out)
    except OSError as exc:
        print(f"rag-monitor review export-golden: {exc}", file=sys.stderr)
        return 1
    print(
        f"{args.out}: {export.written} probes; left out: {export.without_gold} reviewed items "
        f"without gold documents, {export.invalid} with an unusable document id"
    )
    return 0


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("review.html"), help=".html or .md")
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="read the answers the judges judged from this Prometheus (the recording rules' "
        "judged counts and pass shares), for the judge-only and corrected pass shares",
    )
    parser.add_argument(
        "--window",
        help="the judged window, one of guardrails.sample_windows (default: the longest)",
    )


def _report(args: argparse.Namespace, config: Config) -> int:
    from detectors.review.estimates import judged_counts, pass_shares, random_pairs
    from detectors.review.report import summary, write_report
    from monitor.contract.durations import parse_duration
    from monitor.contract.prometheus_query import query_prometheus

    guardrails = config.guardrails
    windows = guardrails.sample_windows
    window = args.window or max(windows, key=parse_duration)
    review_window = guardrails.review_correction.window
    now = time.time()
    try:
        if window not in windows:
            raise ValueError(f"--window {window}: one of guardrails.sample_windows, {windows}")
        reviewed, progress = _read_store(config)
        judged = None
        if args.prometheus:
            judged = judged_counts(
                lambda query: query_prometheus(args.prometheus, query, now), window, guardrails.job
            )
        shares = pass_shares(random_pairs(reviewed, now - parse_duration(review_window)), judged)
        report = write_report(
            reviewed,
            args.out,
            progress,
            now,
            shares=shares,
            windows=None if judged is None else (window, review_window),
        )
    except (ValueError, OSError) as exc:
        print(f"rag-monitor report review: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {summary(report)}")
    return 0


EXPORT_GOLDEN = Command(
    ("review", "export-golden"),
    "write reviewed items with gold documents as golden-set probes",
    _export_arguments,
    _export,
)
REPORT_REVIEW = Command(
    ("report", "review"),
    "write the review report: judge calibration, corrected pass shares, implicit signals",
    _report_arguments,
    _report,
)
