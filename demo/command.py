"""``rag-monitor demo``, registered in the entry-point group ``rag_monitor.commands`` so
that the command line (core) imports nothing from the demo."""

from __future__ import annotations

import argparse
from typing import Any

from monitor.contract.command import Command


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds to run, and the length of the incident cycle (default: until Ctrl-C, "
        "a 300 s cycle)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per refresh instead of the view",
    )


def _run(args: argparse.Namespace, config: Any) -> int:
    from demo.run import run_demo

    return run_demo(config, args.duration, args.config, args.json)


DEMO = Command(
    ("demo",),
    "the sidecar plus a synthetic RAG service with scripted incidents",
    _arguments,
    _run,
)
