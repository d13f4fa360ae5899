"""The shadow comparison's command: ``rag-monitor report shadow``.

It reads the pair store in ``service.state_dir`` and never creates one; the store and the
statistics are imported only when the command runs.
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
    parser.add_argument("--since", default="24h", help="pairs decided in this period, e.g. 24h")
    parser.add_argument("--out", type=Path, default=Path("shadow.html"), help=".html or .md")


def _report(args: argparse.Namespace, config: Config) -> int:
    from detectors.shadow.report import write_report
    from detectors.shadow.store import FILE_NAME, PairStore

    path = Path(config.service.state_dir) / FILE_NAME
    if not path.is_file():
        print(
            f"rag-monitor report shadow: no pair store at {path} (is shadow.enabled on?)",
            file=sys.stderr,
        )
        return 1
    store = PairStore(path.parent)
    try:
        comparison = write_report(store, args.since, args.out)
    except (ValueError, OSError) as exc:
        print(f"rag-monitor report shadow: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    worse = sum(v.word == "worse" for v in comparison.verdicts)
    print(
        f"{args.out}: {sum(comparison.pairs.values())} pairs, {worse} guardrails worse, "
        f"{comparison.unmatched} halves never paired (since {args.since})"
    )
    return 0


REPORT_SHADOW = Command(
    ("report", "shadow"),
    "write the shadow comparison: paired deltas with intervals and verdicts",
    _report_arguments,
    _report,
)
