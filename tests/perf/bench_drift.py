"""Benchmark: one MMD drift test, 1000 reference x 1000 current 384-d vectors, 100 permutations.

The scipy backend against alibi-detect's MMDDrift (pytorch, CPU) on the same
data, in one run. Each side is timed as "setup" (bandwidth and reference
kernel from the reference) plus "test" (one window), best of ``--repeat``;
the statistic of both is printed to show they compute the same MMD^2.
alibi-detect is timed on float32 (its usual input) and float64 (what the
detector's alibi backend passes, for agreement with scipy).
Prints JSON. Run: python tests/perf/bench_drift.py [--repeat 3]

``--state-minutes M`` measures the drift state instead: the detector (default
settings, scipy backend) takes ``--rate`` traced ``--dim``-d query vectors per
second for M minutes of traffic time, and the size of ``drift.sqlite3`` with its
WAL and shared-memory files is read after every minute. The detector's clock is
the traffic's, so a minute of traffic takes as long as the worker needs for its
tests (no faster than the CPU allows, but not held to wall time): the growth is
per minute of traffic whatever the machine. ``--state-max-bytes`` sets
``service.state_max_bytes``. Run:
python tests/perf/bench_drift.py --state-minutes 10 --rate 500
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

BACKLOG = 2000  # vectors the feeder runs ahead of the worker at most: the clock stays close


def best_of(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = work()
        best = min(best, time.perf_counter() - start)
    return best, value


def state_bytes(state_dir: Path) -> int:
    """drift.sqlite3 and its -wal, -shm or -journal files."""
    return sum(p.stat().st_size for p in state_dir.glob("drift.sqlite3*") if p.is_file())


def state_growth(args: argparse.Namespace) -> dict[str, Any]:
    """Size of the drift state after every minute of ``args.rate`` vectors/s (traffic time)."""
    from detectors.drift.config import DriftConfig
    from detectors.drift.detector import DriftDetector
    from monitor.contract.sidecar_registry import SidecarRegistry
    from monitor.contract.trace import RagTrace
    from monitor.runtime.log import configure_logging

    configure_logging("warning")  # a line per test would dominate the run

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(4096, args.dim))
    clock = [time.time()]
    state_dir = Path(tempfile.mkdtemp(prefix="bench-drift-state-"))
    registry = SidecarRegistry()
    options: dict[str, Any] = {"clock": lambda: clock[0], "seed": 1}
    if "state_max_bytes" in inspect.signature(DriftDetector).parameters:
        options["state_max_bytes"] = args.state_max_bytes
    detector = DriftDetector(DriftConfig(backend="scipy"), state_dir, registry, **options)
    detector.start()

    def depth() -> float:
        return registry.get_sample_value("rag_monitor_queue_depth", {"queue": "drift"}) or 0.0

    sizes, started, sent = [], time.perf_counter(), 0
    for _minute in range(args.state_minutes):
        for _ in range(args.rate * 60):
            clock[0] += 1.0 / args.rate
            when = datetime.fromtimestamp(clock[0], tz=UTC)
            vector = tuple(float(v) for v in vectors[sent % len(vectors)])
            detector.observe(RagTrace("t", when, "otlp", query="q", query_embedding=vector))
            sent += 1
            while depth() > BACKLOG:
                time.sleep(0.01)
        while depth() > 0:
            time.sleep(0.01)
        sizes.append(state_bytes(state_dir))
    detector.shutdown()
    mb = [round(size / 1e6, 3) for size in sizes]
    # The reference fills in the first minute or two: the rate is taken after it.
    steady = mb[2:] if len(mb) > 3 else mb
    per_minute = (steady[-1] - steady[0]) / max(len(steady) - 1, 1)
    return {
        "rate_per_s": args.rate,
        "dim": args.dim,
        "traffic_minutes": args.state_minutes,
        "wall_s": round(time.perf_counter() - started, 1),
        "tests": detector.tests_done,
        "state_mb_after_each_minute": mb,
        "mb_per_minute_after_minute_2": round(per_minute, 4),
        "state_max_bytes": options.get("state_max_bytes"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--state-minutes", type=int, default=0, help="measure the state instead")
    parser.add_argument("--rate", type=int, default=500, help="vectors/s (state)")
    parser.add_argument("--state-max-bytes", type=int, default=1 << 30)
    args = parser.parse_args()
    if args.state_minutes:
        print(json.dumps(state_growth(args), indent=2))
        return

    import torch
    from alibi_detect.cd import MMDDrift

    from detectors.drift.scipy_backend import ScipyMmd

    rng = np.random.default_rng(0)
    reference = rng.normal(size=(args.n, args.dim))
    current = rng.normal(loc=0.05, size=(args.n, args.dim))
    results: dict[str, Any] = {
        "n_reference": args.n,
        "n_current": args.n,
        "dim": args.dim,
        "permutations": args.permutations,
        "torch_threads": torch.get_num_threads(),
    }

    def scipy_full() -> Any:
        return ScipyMmd(reference, 0.05, args.permutations, seed=1).test(current)

    scipy_backend = ScipyMmd(reference, 0.05, args.permutations, seed=1)
    total, scipy_result = best_of(args.repeat, scipy_full)
    test_only, _ = best_of(args.repeat, lambda: scipy_backend.test(current))
    results["scipy"] = {
        "setup_plus_test_s": round(total, 4),
        "test_s": round(test_only, 4),
        "statistic": scipy_result.statistic,
        "p_value": scipy_result.p_value,
    }

    for dtype in (np.float32, np.float64):
        ref, cur = reference.astype(dtype), current.astype(dtype)

        def alibi_full(ref: np.ndarray = ref, cur: np.ndarray = cur) -> Any:
            detector = MMDDrift(
                ref, backend="pytorch", p_val=0.05, n_permutations=args.permutations
            )
            return detector.predict(cur)["data"]

        detector = MMDDrift(ref, backend="pytorch", p_val=0.05, n_permutations=args.permutations)
        total, data = best_of(args.repeat, alibi_full)
        test_only, _ = best_of(args.repeat, lambda d=detector, c=cur: d.predict(c))
        results[f"alibi_{np.dtype(dtype).name}"] = {
            "setup_plus_test_s": round(total, 4),
            "test_s": round(test_only, 4),
            "statistic": float(data["distance"]),
            "p_value": float(data["p_val"]),
        }

    alibi = results["alibi_float32"]
    results["speedup_setup_plus_test_vs_alibi_float32"] = round(
        alibi["setup_plus_test_s"] / results["scipy"]["setup_plus_test_s"], 1
    )
    results["speedup_test_vs_alibi_float32"] = round(
        alibi["test_s"] / results["scipy"]["test_s"], 1
    )
    results["statistic_relative_difference_vs_alibi_float64"] = abs(
        results["scipy"]["statistic"] - results["alibi_float64"]["statistic"]
    ) / abs(results["alibi_float64"]["statistic"])
    results["target_met"] = (
        results["scipy"]["setup_plus_test_s"] <= 0.1 * alibi["setup_plus_test_s"]
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
